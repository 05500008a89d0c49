/* atomic.c: bump() adds 1 to counter with an atomic sequence: on
 * aarch64 a load-exclusive/store-exclusive loop written out (no
 * tracepoint may go inside it), elsewhere the compiler's atomic add.
 * Usage: atomic [N] (default 1000) calls bump() N times, prints the
 * counter, then calls done(). */
#include <stdio.h>
#include <stdlib.h>

long counter;

void bump(void)
{
#ifdef __aarch64__
	long v;
	int failed;
	__asm__ volatile("1:	ldaxr	%0, [%2]\n"
			 "	add	%0, %0, #1\n"
			 "	stlxr	%w1, %0, [%2]\n"
			 "	cbnz	%w1, 1b\n"
			 : "=&r"(v), "=&r"(failed)
			 : "r"(&counter)
			 : "memory");
#else
	__atomic_add_fetch(&counter, 1, __ATOMIC_SEQ_CST);
#endif
}

void done(void)
{
	__asm__ volatile("" ::: "memory");
}

int main(int argc, char **argv)
{
	long i, n = argc > 1 ? atol(argv[1]) : 1000;

	for (i = 0; i < n; i++)
		bump();
	printf("counter %ld\n", counter);
	done();
	return 0;
}
