/* Statically linked test inferior for package threaddb: each thread
   prints its thread pointer (fs_base, tpidr_el0) and the address of its copy of
   a thread-local array; then the program waits for stdin to close. */
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

__thread long sarr[3] = {1, 2, 3};
static pthread_barrier_t printed;
static pthread_mutex_t out = PTHREAD_MUTEX_INITIALIZER;

static void report(void)
{
	pthread_mutex_lock(&out);
	printf("thread tp=%#lx sarr=%p\n", (unsigned long)__builtin_thread_pointer(), (void *)sarr);
	fflush(stdout);
	pthread_mutex_unlock(&out);
}

static void *worker(void *arg)
{
	sarr[1] = (long)arg;
	report();
	pthread_barrier_wait(&printed);
	for (;;)
		pause();
	return NULL;
}

int main(void)
{
	pthread_t t[2];
	pthread_barrier_init(&printed, NULL, 3);
	for (long i = 0; i < 2; i++)
		pthread_create(&t[i], NULL, worker, (void *)(i + 10));
	pthread_barrier_wait(&printed);
	report();
	printf("ready\n");
	fflush(stdout);
	char c;
	while (read(0, &c, 1) > 0)
		;
	return 0;
}
