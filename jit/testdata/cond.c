/* Conditions for the jit golden tests: gdb compiles agent expressions
   against the locals and globals of f (see golden_amd64_test.go). */
int a = 5, b = -2;
int table[8] = { 10, 20, 30, 40, 50, 60, 70, 80 };
char name[16] = "tracepoint";
struct node { int value; struct node *next; } tail = { 2, 0 }, head = { 1, &tail };

__attribute__((noinline)) int f(int x, long y)
{
	return x + (int)y + table[x & 7];
}

int main(void) { return f(3, 4) > 100; }
