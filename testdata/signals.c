/* signals.c: SIGUSR1 and SIGALRM handlers, raised with raise() and
 * kill(getpid(), ...). The handlers count deliveries; main prints the
 * counts and calls signals_done(). */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

volatile sig_atomic_t usr1_count;
volatile sig_atomic_t alrm_count;

void usr1_handler(int sig)
{
	(void)sig;
	usr1_count++;
}

void alrm_handler(int sig)
{
	(void)sig;
	alrm_count++;
}

void signals_done(void)
{
}

int main(void)
{
	struct sigaction sa;

	setvbuf(stdout, NULL, _IONBF, 0);
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = usr1_handler;
	sigaction(SIGUSR1, &sa, NULL);
	sa.sa_handler = alrm_handler;
	sigaction(SIGALRM, &sa, NULL);

	raise(SIGUSR1);
	kill(getpid(), SIGUSR1);
	raise(SIGALRM);
	kill(getpid(), SIGALRM);

	printf("usr1 %d alrm %d\n", (int)usr1_count, (int)alrm_count);
	signals_done();
	return 0;
}
