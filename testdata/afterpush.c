/* afterpush.c: a function entry where, in a non-PIE executable, no jump
 * fits at the entry itself but one fits after its push (fasttp's
 * LeadSites), as at 23 of python3.11's entries.
 *
 * Usage: afterpush [CALLS]   (default 1000)
 *
 * after_push(x) returns x + 1 and adds 1 to bumps (through a call);
 * main calls it CALLS times and prints "sum=<S> bumps=<B>".
 *
 * after_push's bytes (16-byte aligned, right after filler, which has no
 * padding either):
 *   +0   53              push %rbx       (the site: 1 byte)
 *   +1   48 89 fb        mov %rdi,%rbx
 *   +4   e8 rel32        call bump
 *   +9   48 8d 43 01     lea 1(%rbx),%rax
 *   +13  48 83 c0 01     add $1,%rax   (x24)
 *   +109 48 83 e8 18     sub $24,%rax
 *   +113 5b              pop %rbx
 *   +114 c3              ret
 * Every shape at +0 fails: a jump there covers the call's head (+4,
 * the displacement's top byte: an int3 or the kept e8 point below
 * address 0 from 0x40xxxx); a short jump's slot (+74 keeping the mov's
 * 0x48, -50 with an int3 there) lies across two 4-byte instructions.
 */
#include <stdio.h>
#include <stdlib.h>

long bumps;

__asm__(".text\n"
	".p2align 4\n"
	".globl filler\n"
	".type filler, @function\n"
	"filler:\n"
	".rept 15\n"
	"add $1, %rax\n"
	".endr\n"
	".byte 0x48, 0x89, 0xc0\n" /* mov %rax,%rax */
	"ret\n"
	".size filler, . - filler\n"
	".globl after_push\n"
	".type after_push, @function\n"
	"after_push:\n"
	"push %rbx\n"
	"mov %rdi, %rbx\n"
	"call bump\n"
	".byte 0x48, 0x8d, 0x43, 0x01\n" /* lea 1(%rbx),%rax */
	".rept 24\n"
	".byte 0x48, 0x83, 0xc0, 0x01\n" /* add $1,%rax */
	".endr\n"
	".byte 0x48, 0x83, 0xe8, 0x18\n" /* sub $24,%rax */
	"pop %rbx\n"
	"ret\n"
	".size after_push, . - after_push\n");

long after_push(long x);
long filler(long x);

__attribute__((noinline)) void bump(void)
{
	bumps++;
}

__attribute__((noinline)) void calls_done(void)
{
	__asm__ volatile("" ::: "memory");
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 1000, i, sum = 0;

	for (i = 0; i < n; i++)
		sum += after_push(i);
	calls_done();
	printf("sum=%ld bumps=%ld\n", sum, bumps);
	return 0;
}
