/* idle.c: a traced program that is mostly idle, to measure what the stub
 * costs while a run collects and the program rarely hits.
 *
 * Usage: idle [SECONDS]   (default 10)
 *
 * Calls f() ten times a second. Measured (README, "An idle run"):
 *   gotpstub --once :2345 ./idle &
 *   gdb -batch -ex 'target remote :2345' -ex 'break main' -ex continue \
 *       -ex 'ftrace f' -ex tstart -ex continue ./idle &
 *   then the stub's utime+stime (fields 14 and 15 of /proc/PID/stat)
 *   over 5 s of the run. */
#include <stdlib.h>
#include <unistd.h>

volatile long n;

__attribute__((noinline)) void f(void)
{
	n++;
}

int main(int argc, char **argv)
{
	int secs = argc > 1 ? atoi(argv[1]) : 10, i;

	for (i = 0; i < secs * 10; i++) {
		usleep(100000);
		f();
	}
	return 0;
}
