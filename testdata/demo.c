/* demo.c: the program traced by scripts/demo.sh.
 *
 * main calls compute() ten times with an int argument, a pointer to a
 * struct and a string; compute has locals and updates a global array.
 * At the end the program prints how many times compute ran. */
#include <stdio.h>
#include <string.h>

struct point {
	int x;
	int y;
	char label[16];
};

int call_count;
int history[8];
const char *greeting = "hello, tracepoints";

int compute(int n, struct point *p, const char *name)
{
	int square = n * n;
	int sum = p->x + p->y;

	call_count++;
	history[n % 8] = square;
	return square + sum + (int)strlen(name);
}

void demo_done(void)
{
}

int main(void)
{
	struct point pt = { 0, 0, "origin" };
	int total = 0;
	int i;

	setvbuf(stdout, NULL, _IONBF, 0);
	for (i = 0; i < 10; i++) {
		pt.x = i;
		pt.y = 2 * i;
		snprintf(pt.label, sizeof pt.label, "pt%d", i);
		total += compute(i, &pt, greeting);
	}
	printf("compute called %d times, total %d\n", call_count, total);
	demo_done();
	return 0;
}
