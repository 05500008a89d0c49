/* sleeper.c: prints its pid, then sleeps in a loop (a target for attach).
 * Usage: sleeper [SECONDS] (default 60): it exits after that many seconds
 * so that a lost sleeper does not live forever. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

volatile int ticks;

void tick(void)
{
	ticks++;
}

int main(int argc, char **argv)
{
	int seconds = 60;
	int i;

	if (argc > 1)
		seconds = atoi(argv[1]);
	printf("sleeper pid %d\n", (int)getpid());
	fflush(stdout);
	for (i = 0; i < seconds * 10; i++) {
		usleep(100000);
		tick();
	}
	return 0;
}
