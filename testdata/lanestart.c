/* lanestart.c: threads started while a fast-tracepoint run collects.
 *
 * Usage: lanestart [THREADS [HITS]]   (defaults 3, 1000)
 *
 * THREADS threads each call tp_site HITS times, then wait on a barrier;
 * once every thread has done its calls, main calls all_hit() (the gdb
 * session breaks there, every thread still alive), then releases the
 * threads and prints "sum=<S>", S being THREADS * HITS * (HITS - 1) / 2. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static pthread_barrier_t hit_all, release;
static long hits = 1000;
static long sums[64];
volatile long sink;

__attribute__((noinline, noclone)) long tp_site(long i)
{
	sink += i;
	return i;
}

__attribute__((noinline, noclone)) void all_hit(void)
{
	__asm__ volatile("" ::: "memory");
}

static void *worker(void *arg)
{
	long id = (long)arg, i, s = 0;

	for (i = 0; i < hits; i++)
		s += tp_site(i);
	sums[id] = s;
	pthread_barrier_wait(&hit_all);
	pthread_barrier_wait(&release);
	return NULL;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 3, i, total = 0;
	pthread_t tids[64];

	if (argc > 2)
		hits = atol(argv[2]);
	if (n < 1 || n > 64)
		n = 3;
	pthread_barrier_init(&hit_all, NULL, n + 1);
	pthread_barrier_init(&release, NULL, n + 1);
	for (i = 0; i < n; i++)
		pthread_create(&tids[i], NULL, worker, (void *)i);
	pthread_barrier_wait(&hit_all);
	all_hit();
	pthread_barrier_wait(&release);
	for (i = 0; i < n; i++) {
		pthread_join(tids[i], NULL);
		total += sums[i];
	}
	printf("sum=%ld\n", total);
	return 0;
}
