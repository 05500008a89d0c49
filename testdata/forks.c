/* forks.c: fork and vfork for the fork-event tests (e2e/debug_test.go).
 * The parent forks a child that calls child_work(1) and exits 3, waits for
 * it, calls parent_work(1), then vforks a child that exits 4 at once. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

int counter;

void child_work(int n) { counter += n; }
void parent_work(int n) { counter -= n; }

int main(void)
{
	int status = 0;
	pid_t pid = fork();
	if (pid == 0) {
		child_work(1);
		printf("child counter %d\n", counter);
		fflush(stdout);
		_exit(3);
	}
	waitpid(pid, &status, 0);
	parent_work(1);
	printf("parent: child status %d counter %d\n", WEXITSTATUS(status), counter);
	pid = vfork();
	if (pid == 0)
		_exit(4);
	waitpid(pid, &status, 0);
	printf("parent: vfork child status %d\n", WEXITSTATUS(status));
	return 0;
}
