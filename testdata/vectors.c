/* vectors.c: loads known values into vector registers, then reaches the
 * global label vectors_loaded (break *vectors_loaded).
 *
 * xmm1 = two doubles {1.5, -2.25} (SSE2); r12 = 0x1122334455667788.
 * With AVX (argv[1] == "avx"): ymm0 = eight int32 {1, 2, ..., 8}, so
 * xmm0 = {1, 2, 3, 4}. Without AVX: xmm0 = int32 {1, 2, 3, 4}. */
#include <stdio.h>
#include <string.h>

int ymm0_ints[8] __attribute__((aligned(32))) = { 1, 2, 3, 4, 5, 6, 7, 8 };
double xmm1_doubles[2] __attribute__((aligned(16))) = { 1.5, -2.25 };

int main(int argc, char **argv)
{
	int use_avx = argc > 1 && strcmp(argv[1], "avx") == 0;

	if (use_avx)
		__asm__ volatile("vmovdqu %0, %%ymm0" : : "m"(ymm0_ints) : "xmm0");
	else
		__asm__ volatile("movdqu %0, %%xmm0" : : "m"(ymm0_ints) : "xmm0");
	__asm__ volatile("movupd %0, %%xmm1\n\t"
			 "movabs $0x1122334455667788, %%r12\n"
			 ".globl vectors_loaded\n"
			 "vectors_loaded:\n\t"
			 "nop"
			 : : "m"(xmm1_doubles) : "xmm1", "r12");
	printf("vectors loaded\n");
	return 0;
}
