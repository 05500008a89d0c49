/* libdemo.c: a tiny shared library (libdemo.so). */
int lib_calls;

int lib_add(int a, int b)
{
	lib_calls++;
	return a + b;
}
