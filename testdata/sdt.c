/* sdt.c: SystemTap SDT markers for static tracepoints (e2e
 * TestStaticTracepoints): demo:tick (two arguments in registers),
 * demo:three (a register, an address, a constant), demo:mem (an argument
 * in memory: a volatile local on the stack) and demo:guarded, which
 * has a semaphore: the program runs it only while the semaphore is not 0
 * (set by a tracer). It prints how often each phase ran the guarded
 * probe: phase 1 while traced, phase 2 after done().
 */
#define _SDT_HAS_SEMAPHORES 1
#include <stdio.h>
#include <sys/sdt.h>

/* With _SDT_HAS_SEMAPHORES every probe has one; only demo:guarded's
 * decides anything. */
__extension__ unsigned short demo_tick_semaphore
	__attribute__((unused)) __attribute__((section(".probes")));
__extension__ unsigned short demo_three_semaphore
	__attribute__((unused)) __attribute__((section(".probes")));
__extension__ unsigned short demo_mem_semaphore
	__attribute__((unused)) __attribute__((section(".probes")));
__extension__ unsigned short demo_guarded_semaphore
	__attribute__((unused)) __attribute__((section(".probes")));

int counter;

__attribute__((noinline)) void done(void)
{
	__asm__ volatile("");
}

__attribute__((noinline)) static void mem(int i, long total)
{
	volatile int slot = i * 5;

	STAP_PROBE2(demo, mem, slot, total);
	counter += slot;
}

static int phase(int n)
{
	int i, guarded = 0;
	long total = 0;

	for (i = 0; i < n; i++) {
		total += i * 3;
		DTRACE_PROBE2(demo, tick, i, total);
		STAP_PROBE3(demo, three, i, &counter, -7);
		mem(i, total);
		if (__builtin_expect(demo_guarded_semaphore, 0)) {
			guarded++;
			STAP_PROBE1(demo, guarded, i);
		}
	}
	return guarded;
}

int main(void)
{
	int g1 = phase(5), g2;

	done();
	g2 = phase(5);
	printf("guarded %d %d\n", g1, g2);
	return 0;
}
