/* cpufloor.c: what running two busy threads costs each of them on this
 * machine, with no tracer at all (the floor under any tracer's
 * two-thread figures; README, "Two threads").
 *
 * Usage: cpufloor NTHREADS   (1 or 2)
 *
 * Each thread runs 100,000,000 rounds of eight independent
 * floating-point multiply-adds (throughput-bound: threads that share a
 * core's execution units on the host slow each other down) and the
 * slowest thread's time is printed. Build without vectorisation:
 *   gcc -O2 -fno-tree-vectorize -pthread -o cpufloor bench/cpufloor.c
 *   ./cpufloor 1; ./cpufloor 2
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static pthread_barrier_t start;
static long long took[2];
volatile double sink;

static long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void *worker(void *arg)
{
	long id = (long)arg, i;
	double x[8] = {1, 1, 1, 1, 1, 1, 1, 1}, y = 1.0000001;
	long long t0;
	int k;

	pthread_barrier_wait(&start);
	t0 = now_ns();
	for (i = 0; i < 100000000; i++)
		for (k = 0; k < 8; k++)
			x[k] = x[k] * y + 1e-9;
	sink = x[0] + x[7];
	took[id] = now_ns() - t0;
	return NULL;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 1, i;
	pthread_t t[2];
	long long slowest = 0;

	if (n < 1 || n > 2) {
		fprintf(stderr, "usage: cpufloor 1|2\n");
		return 2;
	}
	pthread_barrier_init(&start, NULL, n);
	for (i = 0; i < n; i++)
		pthread_create(&t[i], NULL, worker, (void *)(long)i);
	for (i = 0; i < n; i++) {
		pthread_join(t[i], NULL);
		if (took[i] > slowest)
			slowest = took[i];
	}
	printf("threads %d: %.1f ms\n", n, slowest / 1e6);
	return 0;
}
