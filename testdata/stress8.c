/* stress8.c: eight threads in a hot loop while fast tracepoints at that
 * loop are inserted and removed again and again (e2e
 * TestFastTraceStressEightThreads, issue 11).
 *
 * Three sites, each a kind of patch that goes wrong if the installer
 * patches a running loop carelessly:
 *   site3 (= step) is a 3-byte addq then a 3-byte movq: a 5-byte jump
 *         there covers two instructions (successor-preserving or punned);
 *         at the site x is in %rdi and the thread's step d in %rsi;
 *   entry1 starts with a 1-byte push %rbx, then a 3-byte mov (the entry
 *         of many C functions);
 *   leaf  is a lone 1-byte ret.
 * (entry1_site and leaf_site name the same addresses as entry1 and leaf
 * for gdb's ftrace *ADDR: a function declared in C is not an address
 * there.)
 * Thread t (t = 1..8) steps x by d = t and checks its own arithmetic after
 * every call: a broken instruction makes the program exit with status 3.
 * A short busy wait per iteration bounds the hit rate. main creates the
 * threads, calls ready() (where the test stops it first) and waits.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define THREADS 8

long step(long x, long d);
long entry1(long x);
void leaf(void);

__asm__(".text\n"
	".globl step\n.type step,@function\n"
	".globl site3\n"
	"step:\n"
	"site3:\n\t"
	"addq %rsi, %rdi\n\t" /* 48 01 f7 */
	"movq %rdi, %rax\n\t" /* 48 89 f8 */
	"ret\n"
	".size step,.-step\n"
	".globl entry1\n.type entry1,@function\n"
	".globl entry1_site\n"
	"entry1:\n"
	"entry1_site:\n\t"
	"push %rbx\n\t"       /* 53 */
	"mov %rdi, %rbx\n\t"  /* 48 89 fb */
	"lea 1(%rbx), %rax\n\t"
	"pop %rbx\n\t"
	"ret\n"
	".size entry1,.-entry1\n"
	".globl leaf\n.type leaf,@function\n"
	".globl leaf_site\n"
	"leaf:\n"
	"leaf_site:\n\t"
	"ret\n"
	".size leaf,.-leaf\n");

static void *run(void *arg)
{
	long d = (long)arg, x = 0;

	for (long i = 0;; i++) {
		x = step(x, d);
		if (x != d * (i + 1) || entry1(x) != x + 1) {
			fprintf(stderr, "stress8: thread %ld: x = %ld after %ld steps\n", d, x, i + 1);
			exit(3);
		}
		leaf();
		for (volatile int k = 0; k < 20000; k++)
			;
	}
	return NULL;
}

__attribute__((noinline)) void ready(void)
{
	__asm__ volatile("");
}

int main(void)
{
	pthread_t th[THREADS];

	for (long t = 0; t < THREADS; t++) {
		if (pthread_create(&th[t], NULL, run, (void *)(t + 1)) != 0) {
			perror("pthread_create");
			return 1;
		}
	}
	ready();
	for (int t = 0; t < THREADS; t++)
		pthread_join(th[t], NULL);
	return 0;
}
