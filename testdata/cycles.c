/* cycles.c: a hot loop for tracepoints inserted and removed while it runs
 * (e2e TestFastTraceInsertRemoveCycles).
 *
 * site3 is a 3-byte instruction (addq) followed by a 3-byte movq, so a
 * 5-byte jump there covers both and puns the movq's head; leaf
 * is a function that is a lone 1-byte ret. The loop runs until killed and
 * checks its own arithmetic: a patch that broke an instruction would make
 * it exit with status 3.
 */
#include <stdio.h>
#include <stdlib.h>

__attribute__((naked, noinline)) void leaf(void)
{
	__asm__ volatile("ret");
}

__attribute__((noinline)) long step(long x, long d)
{
	long y;

	__asm__ volatile(".globl site3\n"
			 "site3:\n\t"
			 "addq %2, %0\n\t"
			 "movq %0, %1\n\t"
			 : "+r"(x), "=r"(y)
			 : "r"(d));
	return y;
}

int main(void)
{
	long x = 0, i;

	for (i = 0;; i++) {
		x = step(x, 3);
		leaf();
		if (x != 3 * (i + 1)) {
			fprintf(stderr, "cycles: x = %ld after %ld steps\n", x, i + 1);
			return 3;
		}
	}
}
