/* retloop.c: a trap tracepoint at a lone ret, hit 20,000 times (README,
 * "Per hit, trap-style benchmark"): the loop's own time is printed as
 * loop_ns=N. Run under the stub with
 *   gdb -batch -ex 'target remote :PORT' -ex 'break main' -ex c \
 *       -ex 'trace *leaf_site' -ex 'break done' -ex tstart -ex c \
 *       -ex tstop -ex tstatus -ex c retloop
 */
#include <stdio.h>
#include <time.h>
void leaf(void);
__asm__(".text\n.globl leaf\n.type leaf,@function\n.globl leaf_site\nleaf:\nleaf_site:\n\tret\n.size leaf,.-leaf\n");
__attribute__((noinline)) void done(long ns) { __asm__ volatile("" :: "r"(ns)); }
int main(void) {
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (int i = 0; i < 20000; i++) leaf();
	clock_gettime(CLOCK_MONOTONIC, &b);
	long ns = (b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec);
	done(ns);
	printf("loop_ns=%ld\n", ns);
	return 0;
}
