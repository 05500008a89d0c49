/* firsttouch.c: what the first access to a page costs a process, and what
 * makes the next access cheap. Measures, in ns per 4 KiB page, writes of
 * one byte per page into shared memory (a memfd, as the fast-tracepoint
 * lanes are) that MADV_POPULATE_WRITE has allocated already:
 *
 *   1. the process's first write, then its second;
 *   2. a first write after the kernel wrote the pages for the process
 *      (read(2) from /dev/zero into them);
 *   3. a first write after another process (a forked child, the same
 *      memfd pages at the same addresses) wrote them;
 *   4. a first write after another thread of the process wrote them.
 *
 * On a PVM guest (shadow page tables; this project's VMs) 1-3 cost about
 * 5.4 us a page and 4 about 30 ns: only a user-mode access through the
 * process's own page tables makes a page cheap for it, so the stub
 * cannot warm a lane for the program. On bare metal or EPT guests all
 * four are cheap once populated.
 *
 *   gcc -O2 -pthread -o /tmp/firsttouch bench/firsttouch.c && /tmp/firsttouch
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define REGION (32 << 20)

static long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* touch writes a byte to every page of p[0:REGION] and returns ns per page. */
static double touch(volatile char *p)
{
	long long t0 = now_ns();
	for (size_t i = 0; i < REGION; i += 4096)
		p[i] = 1;
	return (double)(now_ns() - t0) / (REGION / 4096);
}

static char *thread_region;
static double thread_ns;

static void *thread_touch(void *arg)
{
	(void)arg;
	thread_ns = touch(thread_region);
	return NULL;
}

int main(void)
{
	int fd = memfd_create("firsttouch", 0);
	if (fd < 0 || ftruncate(fd, 4L * REGION) != 0) {
		perror("memfd");
		return 1;
	}
	char *m = mmap(NULL, 4L * REGION, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED || madvise(m, 4L * REGION, MADV_POPULATE_WRITE) != 0) {
		perror("mmap/madvise");
		return 1;
	}
	char *r1 = m, *r2 = m + REGION, *r3 = m + 2L * REGION, *r4 = m + 3L * REGION;

	double first = touch(r1), second = touch(r1);
	printf("1. populated, first write %.0f ns/page, second %.0f\n", first, second);

	int zero = open("/dev/zero", O_RDONLY);
	long long t0 = now_ns();
	if (zero < 0 || read(zero, r2, REGION) != REGION) {
		perror("/dev/zero");
		return 1;
	}
	double kernel = (double)(now_ns() - t0) / (REGION / 4096);
	printf("2. kernel wrote them (%.0f ns/page), then first write %.0f ns/page\n", kernel, touch(r2));

	fflush(stdout);
	pid_t child = fork();
	if (child == 0) {
		printf("3. another process wrote them (%.0f ns/page), ", touch(r3));
		fflush(stdout);
		_exit(0);
	}
	waitpid(child, NULL, 0);
	printf("then first write %.0f ns/page\n", touch(r3));

	pthread_t th;
	thread_region = r4;
	pthread_create(&th, NULL, thread_touch, NULL);
	pthread_join(th, NULL);
	printf("4. another thread wrote them (%.0f ns/page), then first write %.0f ns/page\n", thread_ns, touch(r4));
	return 0;
}
