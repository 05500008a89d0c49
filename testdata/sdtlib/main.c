/* main.c: calls libsdt.so's lib_work five times before done() and five
 * times after, and prints how often its guarded marker fired in each
 * phase: "fired 5 0" when traced until done(). */
#include <stdio.h>

int lib_work(int i);

__attribute__((noinline)) void done(void)
{
	__asm__ volatile("");
}

int main(void)
{
	int i, before = 0, after = 0;

	for (i = 0; i < 5; i++)
		before += lib_work(i);
	done();
	for (i = 0; i < 5; i++)
		after += lib_work(i);
	printf("fired %d %d\n", before, after);
	return 0;
}
