/* execself.c: execs itself once with an extra argument, then exits with
 * status 7.  The second image is the same program, so a breakpoint on main
 * is hit twice: once per image. */
#include <stdio.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc > 1) {
		printf("second image\n");
		return 7;
	}
	printf("first image\n");
	fflush(stdout);
	execl("/proc/self/exe", argv[0], "again", (char *)0);
	return 1;
}
