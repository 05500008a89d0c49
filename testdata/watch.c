/* watch.c: a global written in a loop, for watchpoints. */
#include <stdio.h>

int watched;

int main(void)
{
	int i;

	setvbuf(stdout, NULL, _IONBF, 0);
	for (i = 1; i <= 5; i++)
		watched = i * 10;
	printf("watched %d\n", watched);
	return 0;
}
