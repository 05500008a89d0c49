/* keptshort.c: a function whose first instruction is 1 byte long and
 * whose next byte, taken as a short jump's displacement, points into
 * padding after a ret: the fast tracepoint at its entry gets a short
 * jump that keeps that byte (fasttp's keptShortSlot).
 *
 * Usage: keptshort [CALLS]   (default 1000)
 *
 * kept_short(x) returns 0xff80 + x; main calls it CALLS times, through
 * its entry and (as a thread arriving at the kept instruction would)
 * through kept_short_xor, the kept xor, and prints "sum=<S>".
 *
 * kept_short's bytes (offsets from the symbol, 16-byte aligned):
 *   +0  98              cwtl            (the site: 1 byte)
 *   +1  31 c0           xor %eax,%eax   (kept: rel8 0x31, slot at +51)
 *   +3  b8 80 ff 00 00  mov $0xff80,%eax
 *   +8  01 f8           add %edi,%eax
 *   +10 c3              ret
 *   +11 90 x5           padding
 *   +16 b8 01 00 00 00  mov $1,%eax (x6)
 *   +46 31 c0 31 c0     xor %eax,%eax (x2)
 *   +50 c3              ret
 *   +51 90 x13          padding (the slot: +51..+55)
 *   +64 c3              ret
 */
#include <stdio.h>
#include <stdlib.h>

__asm__(".text\n"
	".p2align 4\n"
	".globl kept_short\n"
	".type kept_short, @function\n"
	"kept_short:\n"
	".byte 0x98\n"
	".globl kept_short_xor\n"
	"kept_short_xor:\n"
	".byte 0x31, 0xc0, 0xb8, 0x80, 0xff, 0x00, 0x00, 0x01, 0xf8, 0xc3\n"
	".byte 0x90, 0x90, 0x90, 0x90, 0x90\n"
	".rept 6\n"
	".byte 0xb8, 0x01, 0x00, 0x00, 0x00\n"
	".endr\n"
	".byte 0x31, 0xc0, 0x31, 0xc0, 0xc3\n"
	".rept 13\n"
	".byte 0x90\n"
	".endr\n"
	".byte 0xc3\n"
	".size kept_short, . - kept_short\n");

long kept_short(long x);
long kept_short_xor(long x);

__attribute__((noinline)) void calls_done(void)
{
	__asm__ volatile("" ::: "memory");
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 1000, i, sum = 0;

	for (i = 0; i < n; i++)
		sum += kept_short(i) + kept_short_xor(i);
	calls_done();
	printf("sum=%ld\n", sum);
	return 0;
}
