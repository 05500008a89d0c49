/* twoforks.c: two threads fork at the same moment (after a barrier),
 * with the raw system call: glibc's fork takes locks, and a thread
 * stopped at its fork event would hold up the other's. Each child exits
 * at once, each parent thread waits for its child. main prints "done"
 * after joining both. */
#include <pthread.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static pthread_barrier_t barrier;

static void *forker(void *arg)
{
	(void)arg;
	pthread_barrier_wait(&barrier);
	pid_t pid = syscall(SYS_fork);
	if (pid == 0)
		syscall(SYS_exit_group, 3);
	waitpid(pid, NULL, 0);
	return NULL;
}

int main(void)
{
	pthread_t t[2];
	pthread_barrier_init(&barrier, NULL, 2);
	for (int i = 0; i < 2; i++)
		pthread_create(&t[i], NULL, forker, NULL);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	puts("done");
	return 0;
}
