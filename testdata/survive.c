/* survive.c: a program that must outlive its debugger (the stub killed
 * with SIGKILL while it runs).
 *
 * Usage: survive OUTFILE [ITERATIONS [USLEEP [THREADS]]]
 * (defaults 40, 50000, 1).
 *
 * THREADS threads (the main one included) each call survive_step(i) for
 * i = 0 .. ITERATIONS-1, sleeping USLEEP microseconds after each call, and
 * add up the results. Once every thread is done the program writes
 * "done threads=T iterations=N sum=S" to OUTFILE, where S is
 * T * sum(3*i + 1). It prints "loop running" (flushed) when the main
 * thread enters its loop, so a test knows when to kill the stub. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static int iterations = 40;
static int pause_us = 50000;

long survive_step(long i)
{
	return 3 * i + 1;
}

static void *worker(void *arg)
{
	long sum = 0;
	int i;

	for (i = 0; i < iterations; i++) {
		sum += survive_step(i);
		usleep(pause_us);
	}
	*(long *)arg = sum;
	return NULL;
}

int main(int argc, char **argv)
{
	int threads = 1, t;
	long sums[64], total = 0;
	pthread_t tids[64];
	FILE *f;

	if (argc < 2) {
		fprintf(stderr, "usage: survive OUTFILE [ITERATIONS [USLEEP [THREADS]]]\n");
		return 2;
	}
	if (argc > 2)
		iterations = atoi(argv[2]);
	if (argc > 3)
		pause_us = atoi(argv[3]);
	if (argc > 4)
		threads = atoi(argv[4]);
	if (threads < 1 || threads > 64)
		threads = 1;
	for (t = 1; t < threads; t++)
		pthread_create(&tids[t], NULL, worker, &sums[t]);
	printf("loop running\n");
	fflush(stdout);
	worker(&sums[0]);
	for (t = 1; t < threads; t++)
		pthread_join(tids[t], NULL);
	for (t = 0; t < threads; t++)
		total += sums[t];
	f = fopen(argv[1], "w");
	if (f == NULL) {
		perror(argv[1]);
		return 1;
	}
	fprintf(f, "done threads=%d iterations=%d sum=%ld\n", threads, iterations, total);
	fclose(f);
	return 0;
}
