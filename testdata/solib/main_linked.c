/* main_linked.c: linked against libdemo.so, calls lib_add. */
#include <stdio.h>

int lib_add(int a, int b);

int main(void)
{
	int sum = lib_add(2, 3);

	setvbuf(stdout, NULL, _IONBF, 0);
	printf("lib_add(2, 3) = %d\n", sum);
	return 0;
}
