/* main_dlopen.c: dlopen()s the library named by argv[1] and calls its
 * lib_add through dlsym. */
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv)
{
	void *handle;
	int (*add)(int, int);

	setvbuf(stdout, NULL, _IONBF, 0);
	if (argc < 2) {
		fprintf(stderr, "usage: main_dlopen LIBRARY\n");
		return 2;
	}
	handle = dlopen(argv[1], RTLD_NOW);
	if (handle == NULL) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return 1;
	}
	add = (int (*)(int, int))dlsym(handle, "lib_add");
	if (add == NULL) {
		fprintf(stderr, "dlsym: %s\n", dlerror());
		return 1;
	}
	printf("lib_add(40, 2) = %d\n", add(40, 2));
	dlclose(handle);
	return 0;
}
