/* bpcover.c: a fast tracepoint whose jump covers two instructions, for a
 * gdb breakpoint on the second (e2e TestBreakpointInCoveredBytes).
 *
 * covered is a 3-byte addq followed by a 3-byte movq at covered_next, so
 * a 5-byte jump at covered spans covered_next's head. The program checks
 * its own arithmetic: it prints x=30 and exits 0.
 */
#include <stdio.h>

__attribute__((noinline)) long step(long x, long d)
{
	long y;

	__asm__ volatile(".globl covered\n"
			 "covered:\n\t"
			 "addq %2, %0\n\t"
			 ".globl covered_next\n"
			 "covered_next:\n\t"
			 "movq %0, %1\n\t"
			 : "+r"(x), "=r"(y)
			 : "r"(d));
	return y;
}

__attribute__((noinline)) void done(void)
{
	__asm__ volatile("");
}

int main(void)
{
	long x = 0;
	int i;

	for (i = 0; i < 10; i++)
		x = step(x, 3);
	printf("x=%ld\n", x);
	done();
	return x != 30;
}
