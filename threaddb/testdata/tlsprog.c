/* Test inferior for package threaddb: thread-local variables in the main
   program, in a linked library and in a dlopen'ed library. Each thread
   prints its thread pointer (fs_base on x86-64, tpidr_el0 on aarch64)
   and the addresses of its copies; then the program waits for stdin to
   close. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

__thread int a = 42;
static __thread long arr[4];

extern int *linked_tls_addr(void);

static int *(*dl_tls_addr)(void);
static pthread_barrier_t printed;
static pthread_mutex_t out = PTHREAD_MUTEX_INITIALIZER;

static void report(const char *who, int touch_dl)
{
	int *dl = touch_dl ? dl_tls_addr() : NULL;
	pthread_mutex_lock(&out);
	printf("thread %s tp=%#lx a=%p arr=%p linked=%p dl=%p\n", who,
	       (unsigned long)__builtin_thread_pointer(), (void *)&a, (void *)arr,
	       (void *)linked_tls_addr(), (void *)dl);
	fflush(stdout);
	pthread_mutex_unlock(&out);
}

static void *worker(void *arg)
{
	long id = (long)arg;
	a = 100 * (int)id;
	for (int i = 0; i < 4; i++)
		arr[i] = 1000 * id + i;
	*linked_tls_addr() = 10 * (int)id;
	if (id == 1)
		*dl_tls_addr() = 7;
	report(id == 1 ? "t1" : "t2", id == 1);
	pthread_barrier_wait(&printed);
	for (;;)
		pause();
	return NULL;
}

static struct link_map *map_of(void *handle)
{
	struct link_map *lm = NULL;
	if (handle == NULL || dlinfo(handle, RTLD_DI_LINKMAP, &lm) != 0) {
		fprintf(stderr, "dlinfo: %s\n", dlerror());
		exit(1);
	}
	return lm;
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: tlsprog /path/libtlsdl.so\n");
		return 2;
	}
	void *dl = dlopen(argv[1], RTLD_NOW);
	if (dl == NULL) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return 1;
	}
	dl_tls_addr = (int *(*)(void))dlsym(dl, "dl_tls_addr");
	void *linked = dlopen("libtlslinked.so", RTLD_NOW | RTLD_NOLOAD);
	printf("lm main=%p linked=%p dl=%p\n", (void *)_r_debug.r_map,
	       (void *)map_of(linked), (void *)map_of(dl));
	fflush(stdout);

	pthread_t t[2];
	pthread_barrier_init(&printed, NULL, 3);
	for (long i = 0; i < 2; i++)
		pthread_create(&t[i], NULL, worker, (void *)(i + 1));
	pthread_barrier_wait(&printed);
	report("main", 0);
	printf("ready\n");
	fflush(stdout);
	char c;
	while (read(0, &c, 1) > 0)
		;
	return 0;
}
