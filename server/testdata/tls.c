/* tls.c: a thread-local variable with a different value in two threads,
   for the qGetTLSAddr test. done() is where the test stops. */
#include <pthread.h>

__thread int tlsvar = 42;

void done(void) {}

static void *worker(void *arg) {
  (void)arg;
  tlsvar = 7;
  done();
  return 0;
}

int main(void) {
  pthread_t t;
  pthread_create(&t, 0, worker, 0);
  pthread_join(t, 0);
  done();
  return tlsvar; /* 42 */
}
