/* trace.c: a program for tracepoint tests.
 *
 * Usage: trace [ITERATIONS] (default 10).
 *
 * - globals: g_counter, g_array[10], g_record (a struct), g_string;
 * - traced_function(n, rec, msg): n is worth a condition (n == 3, n % 2);
 *   locals square and doubled;
 * - a loop in main with counter i calling traced_function and asm_worker;
 * - asm_worker(x), written in assembly, has global labels at a call
 *   (at_call), a conditional jump (at_jcc) and a rip-relative add
 *   (at_riprel), so gdb can `trace *at_call` etc. It returns
 *   add_one(x) + (x < 5 ? 0 : 100) + rip_bias; main checks every result
 *   against the same formula in C and prints "asm_worker results OK"
 *   (or "MISMATCH"), then the sum of all results;
 * - pun_fn(n), also assembly, counts a loop n times; its label pun_site
 *   starts a 2-byte instruction followed by the loop's head (pun_head), so a
 *   5-byte jump at pun_site covers the head of an instruction the loop
 *   branches back to (fast tracepoints must trap and redirect there); main
 *   checks pun_fn(i + 1) == i + 1 and prints "pun_fn results OK";
 * - trace_done() is called last, a place to stop before exit.
 *
 * On aarch64 asm_worker has the same labels at bl (at_call), b.lt
 * (at_jcc) and adrp (at_riprel, the page of rip_bias), with x19 for
 * %rbx and x0 for %rax and %rdi; pun_fn has the same loop (no puns:
 * every instruction has 4 bytes). */
#include <stdio.h>
#include <stdlib.h>

struct record {
	int id;
	long value;
	char name[12];
};

int g_counter;
int g_array[10];
struct record g_record = { 7, 700, "seven" };
char g_string[32] = "trace me";
int rip_bias __attribute__((visibility("hidden"))) = 7;

long asm_worker(long x);

long add_one(long x)
{
	return x + 1;
}

#if defined(__x86_64__)
__asm__(".text\n"
	".globl asm_worker\n"
	".type asm_worker, @function\n"
	"asm_worker:\n\t"
	"push %rbx\n\t"
	"mov %rdi, %rbx\n"
	".globl at_call\n"
	"at_call:\n\t"
	"call add_one\n\t"
	"cmp $5, %rbx\n"
	".globl at_jcc\n"
	"at_jcc:\n\t"
	"jl 1f\n\t"
	"add $100, %rax\n"
	"1:\n"
	".globl at_riprel\n"
	"at_riprel:\n\t"
	"movslq rip_bias(%rip), %rdx\n\t"
	"add %rdx, %rax\n\t"
	"pop %rbx\n\t"
	"ret\n"
	".size asm_worker, .-asm_worker\n"
	".globl pun_fn\n"
	".type pun_fn, @function\n"
	"pun_fn:\n\t"
	"xor %eax, %eax\n"
	".globl pun_site\n"
	"pun_site:\n\t"
	"mov %edi, %ecx\n"
	".globl pun_head\n"
	"pun_head:\n\t"
	"add $1, %eax\n\t"
	"dec %ecx\n\t"
	"jnz pun_head\n\t"
	"ret\n"
	".size pun_fn, .-pun_fn\n");
#elif defined(__aarch64__)
__asm__(".text\n"
	".globl asm_worker\n"
	".type asm_worker, %function\n"
	"asm_worker:\n\t"
	"stp x29, x30, [sp, -32]!\n\t"
	"mov x29, sp\n\t"
	"str x19, [sp, 16]\n\t"
	"mov x19, x0\n"
	".globl at_call\n"
	"at_call:\n\t"
	"bl add_one\n\t"
	"cmp x19, 5\n"
	".globl at_jcc\n"
	"at_jcc:\n\t"
	"b.lt 1f\n\t"
	"add x0, x0, 100\n"
	"1:\n"
	".globl at_riprel\n"
	"at_riprel:\n\t"
	"adrp x2, rip_bias\n\t"
	"ldrsw x2, [x2, :lo12:rip_bias]\n\t"
	"add x0, x0, x2\n\t"
	"ldr x19, [sp, 16]\n\t"
	"ldp x29, x30, [sp], 32\n\t"
	"ret\n"
	".size asm_worker, .-asm_worker\n"
	".globl pun_fn\n"
	".type pun_fn, %function\n"
	"pun_fn:\n\t"
	"mov w1, w0\n\t"
	"mov x0, 0\n"
	".globl pun_site\n"
	"pun_site:\n\t"
	"nop\n"
	".globl pun_head\n"
	"pun_head:\n\t"
	"add x0, x0, 1\n\t"
	"subs w1, w1, 1\n\t"
	"b.ne pun_head\n\t"
	"ret\n"
	".size pun_fn, .-pun_fn\n");
#else
#error "trace.c: asm_worker and pun_fn are written for x86-64 and aarch64"
#endif

long pun_fn(long n);

int traced_function(int n, struct record *rec, const char *msg)
{
	int square = n * n;
	int doubled = 2 * n;

	g_counter++;
	g_array[n % 10] = square;
	rec->value = square + doubled;
	return square + doubled + msg[0];
}

void trace_done(void)
{
}

int main(int argc, char **argv)
{
	int iterations = 10;
	long asm_sum = 0;
	int ok = 1, pun_ok = 1;
	int i;

	setvbuf(stdout, NULL, _IONBF, 0);
	if (argc > 1)
		iterations = atoi(argv[1]);
	for (i = 0; i < iterations; i++) {
		long r;

		traced_function(i, &g_record, g_string);
		r = asm_worker(i);
		if (r != i + 1 + (i < 5 ? 0 : 100) + 7)
			ok = 0;
		asm_sum += r;
		if (pun_fn(i + 1) != i + 1)
			pun_ok = 0;
	}
	printf("asm_worker results %s\n", ok ? "OK" : "MISMATCH");
	printf("asm_sum %ld\n", asm_sum);
	printf("pun_fn results %s\n", pun_ok ? "OK" : "MISMATCH");
	printf("g_counter %d\n", g_counter);
	trace_done();
	return 0;
}
