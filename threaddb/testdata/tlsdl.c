/* dlopen'ed library with a thread-local array (dynamic TLS). */
__thread int dl_tls[2] = {5, 6};
int *dl_tls_addr(void) { return &dl_tls[1]; }
