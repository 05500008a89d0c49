/* threadstart.c: how long a new thread takes to start, for
 * scripts/bench-threadstart.sh.
 *
 * Usage: threadstart NTHREADS
 *
 * main creates NTHREADS threads one after another; each sets its flag on
 * entry and then waits on a barrier, so every thread is alive at once
 * (each needs a lane of its own while a fast-tracepoint run collects).
 * For each, main measures from just before pthread_create to the moment
 * it sees the flag set, and prints
 *
 *     start_us=<median> max_us=<max> threads=<N>
 *
 * tp_site is where the session puts its fast tracepoint (never called: the
 * run only has to be collecting).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static pthread_barrier_t done;
static volatile int started[64];
volatile long sink;

__attribute__((noinline, noclone)) void tp_site(long v)
{
	__asm__ volatile("" ::: "memory");
	sink += v;
}

static long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void *worker(void *arg)
{
	started[(long)arg] = 1;
	pthread_barrier_wait(&done);
	return NULL;
}

static int cmp(const void *a, const void *b)
{
	long long x = *(const long long *)a, y = *(const long long *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 8, i;
	pthread_t tids[64];
	long long us[64];

	if (n < 1 || n > 63) {
		fprintf(stderr, "usage: threadstart NTHREADS(1..63)\n");
		return 2;
	}
	pthread_barrier_init(&done, NULL, n + 1);
	for (i = 0; i < n; i++) {
		long long t0 = now_ns();
		pthread_create(&tids[i], NULL, worker, (void *)i);
		while (!started[i])
			;
		us[i] = (now_ns() - t0) / 1000;
	}
	pthread_barrier_wait(&done);
	for (i = 0; i < n; i++)
		pthread_join(tids[i], NULL);
	qsort(us, n, sizeof us[0], cmp);
	printf("start_us=%lld max_us=%lld threads=%ld\n", us[n / 2], us[n - 1], n);
	return 0;
}
