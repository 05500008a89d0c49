/* Linked library with a thread-local variable (static TLS). */
__thread int linked_tls = 3;
int *linked_tls_addr(void) { return &linked_tls; }
