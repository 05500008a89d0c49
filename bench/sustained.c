/* sustained.c: the traced program of scripts/bench-sustained.sh.
 *
 * Usage: sustained NTHREADS HITS_PER_THREAD [own]
 *
 * Each of NTHREADS threads calls hit(i, i + 1) HITS_PER_THREAD times in a
 * tight loop and measures its loop with clock_gettime(CLOCK_MONOTONIC).
 * hit's first instruction is the 8-byte `addq $1, counter(%rip)` the
 * fast tracepoint goes on. When every thread is done, main calls
 * loop_done() (the gdb session breaks there) and prints
 *
 *     loop_ns=<slowest thread's loop ns> hits=<calls per thread> threads=<N>
 *
 * With "own", the threads call hit_own instead, whose first instruction is
 * `addq $1, %fs:own_counter@tpoff` (a thread-local counter): the same loop
 * without the cache line hit's counter makes every thread share, so the
 * tracer's own scaling across threads shows.
 *
 * Run without a debugger it is the untraced baseline of the same loop.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

long counter;
volatile long sink;
static long hits_per_thread;
static long long loop_ns[64];
static pthread_barrier_t start;

__attribute__((noinline, noclone)) void hit(int a, int b)
{
	__asm__ volatile("addq $1, counter(%%rip)" ::: "memory");
	sink += a + b;
}

__thread long own_counter;
__thread long own_sink;

__attribute__((noinline, noclone)) void hit_own(int a, int b)
{
	__asm__ volatile("addq $1, %%fs:own_counter@tpoff" ::: "memory");
	own_sink += a + b;
}

static int own;

__attribute__((noinline, noclone)) void loop_done(long long ns)
{
	sink += ns;
	__asm__ volatile("" ::: "memory");
}

static long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void *worker(void *arg)
{
	long id = (long)arg;
	long i;
	long long t0;

	pthread_barrier_wait(&start);
	t0 = now_ns();
	if (own)
		for (i = 0; i < hits_per_thread; i++)
			hit_own((int)i, (int)i + 1);
	else
		for (i = 0; i < hits_per_thread; i++)
			hit((int)i, (int)i + 1);
	loop_ns[id] = now_ns() - t0;
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t tids[64];
	long n = argc > 1 ? atol(argv[1]) : 1;
	long long slowest = 0;
	long i;

	hits_per_thread = argc > 2 ? atol(argv[2]) : 100000;
	own = argc > 3 && argv[3][0] == 'o';
	if (n < 1 || n > 64 || hits_per_thread < 1) {
		fprintf(stderr, "usage: sustained NTHREADS(1..64) HITS_PER_THREAD\n");
		return 2;
	}
	pthread_barrier_init(&start, NULL, n);
	for (i = 0; i < n; i++)
		pthread_create(&tids[i], NULL, worker, (void *)i);
	for (i = 0; i < n; i++) {
		pthread_join(tids[i], NULL);
		if (loop_ns[i] > slowest)
			slowest = loop_ns[i];
	}
	loop_done(slowest);
	printf("loop_ns=%lld hits=%ld threads=%ld\n", slowest, hits_per_thread, n);
	return 0;
}
