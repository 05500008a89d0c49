/* Test program for the agentexpr golden tests: gdb compiles agent
   expressions against the locals and globals of f. */
#include <stdio.h>

struct point {
	int x;
	long y;
	char tag;
};

struct node {
	int value;
	struct node *next;
};

struct point origin = { 3, -4, 'o' };
int table[8] = { 10, 20, 30, 40, 50, 60, 70, 80 };
struct node tail = { 2, 0 };
struct node head = { 1, &tail };
const char *greeting = "hello, tracepoint";

__attribute__((noinline)) int f(int a, int b)
{
	int r = 2 * a + 3 * b;
	if (r > 0)
		r += table[a & 7] + origin.x + head.next->value;
	return r;
}

int main(void)
{
	printf("%d\n", f(5, -2));
	return 0;
}
