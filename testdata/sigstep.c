/* sigstep.c: a SIGALRM arrives while gdb steps a line that waits for it
 * (e2e TestStepIntoSignalHandler, after gdb.base/sigstep.exp). */
#include <signal.h>
#include <string.h>
#include <sys/time.h>

volatile int done;

void handler(int sig)
{
	done = sig; /* handler body */
}

int main(void)
{
	struct sigaction sa;
	struct itimerval it;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = handler;
	sigaction(SIGALRM, &sa, 0);
	memset(&it, 0, sizeof(it));
	it.it_value.tv_usec = 2000;
	setitimer(ITIMER_REAL, &it, 0);
	while (!done) /* wait */
		;
	return 0;
}
