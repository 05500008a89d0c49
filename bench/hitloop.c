/* hitloop.c: the traced program of scripts/bench-trap.sh.
 *
 * Calls the non-inlined function hit(i) for i = 0 .. N-1 (N is argv[1],
 * default 20000) from the main thread, with argv[2] (default 0) extra threads
 * idling in pause() meanwhile (a multi-threaded program whose leader hits
 * the tracepoint, like gdb.trace/tspeed.exp with the in-process agent), and measures the loop's wall time with
 * clock_gettime(CLOCK_MONOTONIC). After the loop it calls loop_done(), where
 * the benchmark's gdb session puts a breakpoint to stop the trace
 * experiment, then prints
 *
 *     loop_ns=<total nanoseconds> calls=<N>
 *
 * Run without a debugger it is the untraced baseline of the same loop.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <pthread.h>
#include <unistd.h>

/* sink keeps hit's body from being optimised away. */
volatile long sink;

/* hit is where the tracepoint goes: one call per loop iteration. */
__attribute__((noinline, noclone)) void hit(int i)
{
	sink += i;
	__asm__ volatile("" ::: "memory");
}

/* loop_done is called once the timed loop has ended (gdb breaks here). */
__attribute__((noinline, noclone)) void loop_done(long loop_ns, int calls)
{
	sink += loop_ns + calls;
	__asm__ volatile("" ::: "memory");
}

/* idle is the body of the extra threads: they never return. */
static void *idle(void *arg)
{
	(void)arg;
	for (;;)
		pause();
	return NULL;
}

static long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char **argv)
{
	int calls = 20000;
	if (argc > 1) {
		char *end;
		long n = strtol(argv[1], &end, 10);
		if (*end != '\0' || n < 0 || n > 100000000) {
			fprintf(stderr, "usage: %s [calls [idle-threads]]\n", argv[0]);
			return 2;
		}
		calls = (int)n;
	}
	if (argc > 2) {
		char *end;
		long n = strtol(argv[2], &end, 10);
		if (*end != '\0' || n < 0 || n > 64) {
			fprintf(stderr, "usage: %s [calls [idle-threads]]\n", argv[0]);
			return 2;
		}
		for (long k = 0; k < n; k++) {
			pthread_t th;
			if (pthread_create(&th, NULL, idle, NULL) != 0) {
				perror("pthread_create");
				return 1;
			}
		}
	}

	long long start = now_ns();
	for (int i = 0; i < calls; i++)
		hit(i);
	long long loop_ns = now_ns() - start;

	loop_done((long)loop_ns, calls);
	printf("loop_ns=%lld calls=%d\n", loop_ns, calls);
	fflush(stdout);
	return 0;
}
