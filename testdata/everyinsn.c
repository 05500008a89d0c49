/* everyinsn.c: functions for a tracepoint at each of their instructions
 * (e2e TestFastTraceEveryInstruction): a switch the compiler turns into a
 * jump table, loops, calls, a leaf, early returns. Every round of main
 * computes the same sum and passes it to round_done, where gdb stops
 * between rounds; a tracepoint that broke an instruction changes the sum
 * or the program's fate.
 */
#include <stdlib.h>

static volatile long sink;

__attribute__((noinline)) int leaf(int x)
{
	return x ^ 0x5a;
}

__attribute__((noinline)) int dispatch(int op, int a, int b)
{
	switch (op) {
	case 0:
		return a + b;
	case 1:
		return a - b;
	case 2:
		return a * b;
	case 3:
		return a ^ b;
	case 4:
		return leaf(a) + b;
	case 5:
		return a << (b & 7);
	case 6:
		return a > b ? a : b;
	case 7:
		return (a | b) & 0xffff;
	default:
		return -1;
	}
}

__attribute__((noinline)) long work(const int *v, int n)
{
	long acc = 0;
	int i;

	for (i = 0; i < n; i++) {
		int x = v[i];

		if (x & 1)
			acc += dispatch(x % 9, x, i);
		else
			acc -= leaf(x) * 3;
		while (x > 100)
			x /= 7;
		acc += x;
	}
	return acc;
}

__attribute__((noinline)) void round_done(long sum)
{
	sink = sum;
}

int main(int argc, char **argv)
{
	int v[48], i, r, rounds = argc > 1 ? atoi(argv[1]) : 1000;

	for (i = 0; i < 48; i++)
		v[i] = (int)((i * 2654435761u) >> 20);
	for (r = 0; r < rounds; r++)
		round_done(work(v, 48));
	return 0;
}
