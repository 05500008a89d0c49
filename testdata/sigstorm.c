/* sigstorm.c: signals delivered to traced threads (issue 14).
 *
 * Two worker threads call f() in a loop (the function a tracepoint is put
 * on) while a SIGPROF interval timer fires every 100 µs of process CPU
 * time and a sender thread sends SIGUSR1 to each worker with
 * pthread_sigqueue as soon as the worker handled the previous one. Every
 * SIGUSR1 carries a sequence number (si_value) and its send time; the
 * worker's handler checks that it comes from sigqueue (si_code SI_QUEUE)
 * with the next number (in order, none lost, none doubled) and records
 * its delivery latency.
 *
 * Usage: sigstorm [DURATION_MS [SPIN]]   (3000, 0: SPIN busy iterations
 * between two calls of f)
 *
 * After DURATION_MS the sender stops sending and waits up to GRACE_MS for
 * the signals still on their way, then the workers stop. It prints one
 * line per worker and a total line:
 *   worker W: sent N delivered N dup 0 gap 0 badinfo 0 lost 0 late 0 maxlat_us L calls C
 *   sigstorm: delivered N in S s rate R/s maxlat_us L late N sigprof P ok|FAIL
 * where lost counts signals never handled, dup a number handled twice, gap
 * a number handled out of turn, badinfo a SIGUSR1 whose siginfo is not the
 * sender's, late the signals handled more than LATE_MS after they were
 * sent. ok means none was lost, doubled, out of order or with the wrong
 * siginfo (late ones are only counted: on a loaded machine there are some
 * without any debugger). Then it calls sigstorm_done() (a place for a
 * breakpoint) and exits 0 if ok, 1 otherwise. */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define NWORKERS 2
#define LATE_MS 500
#define GRACE_MS 5000

struct worker {
	pthread_t th;
	int index;
	_Atomic long sent;         /* last sequence number sent */
	_Atomic long acked;        /* last sequence number handled */
	_Atomic long long sent_ns; /* when the last one was sent */
	long delivered, dups, gaps, badinfo, late, lost;
	long long max_lat_ns;
	_Atomic long calls;
	_Atomic int ready; /* my_worker is set: its handler can count */
};

static struct worker workers[NWORKERS];
static _Atomic int stop_workers;
static _Atomic int stop_sending;
static _Atomic int acks; /* futex word: bumped by every handled SIGUSR1 */
static _Atomic long sigprof_count;
static __thread int my_worker = -1;
static long spin;

volatile long f_sink;

/* f is the traced function. */
__attribute__((noinline)) long f(long x)
{
	f_sink += x;
	return x * 2 + 1;
}

void sigstorm_done(void)
{
}

static long long now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void usr1_handler(int sig, siginfo_t *si, void *uc)
{
	struct worker *w;
	long seq, acked;
	long long lat;

	(void)sig;
	(void)uc;
	if (my_worker < 0)
		return; /* not a worker: cannot happen (sent to ready workers) */
	w = &workers[my_worker];
	if (si->si_code != SI_QUEUE || si->si_pid != getpid()) {
		w->badinfo++;
		return;
	}
	seq = si->si_value.sival_ptr ? (long)si->si_value.sival_ptr : 0;
	acked = atomic_load(&w->acked);
	if (seq <= acked) {
		w->dups++;
		return;
	}
	if (seq != acked + 1)
		w->gaps++;
	lat = now_ns() - atomic_load(&w->sent_ns);
	if (seq == atomic_load(&w->sent)) {
		if (lat > w->max_lat_ns)
			w->max_lat_ns = lat;
		if (lat > LATE_MS * 1000000LL)
			w->late++;
	}
	w->delivered++;
	atomic_store(&w->acked, seq);
	atomic_fetch_add(&acks, 1);
	syscall(SYS_futex, &acks, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

static void prof_handler(int sig)
{
	(void)sig;
	atomic_fetch_add(&sigprof_count, 1);
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	long i = 0;

	my_worker = w->index;
	atomic_store(&w->ready, 1);
	while (!atomic_load(&stop_workers)) {
		f(i++);
		atomic_fetch_add(&w->calls, 1);
		for (volatile long k = 0; k < spin; k++)
			;
	}
	return NULL;
}

/* send_next sends worker w its next SIGUSR1. */
static void send_next(struct worker *w)
{
	long seq = atomic_load(&w->sent) + 1;
	union sigval v;
	int err;

	v.sival_ptr = (void *)seq;
	atomic_store(&w->sent_ns, now_ns());
	atomic_store(&w->sent, seq);
	err = pthread_sigqueue(w->th, SIGUSR1, v);
	if (err != 0) {
		fprintf(stderr, "pthread_sigqueue: %s\n", strerror(err));
		exit(2);
	}
}

static void *sender_main(void *arg)
{
	long long grace_end = 0;

	(void)arg;
	for (;;) {
		int seen = atomic_load(&acks);
		int stopping = atomic_load(&stop_sending);
		int inflight = 0;
		struct timespec ts = {0, 1000000};

		if (stopping && grace_end == 0)
			grace_end = now_ns() + GRACE_MS * 1000000LL;
		for (int i = 0; i < NWORKERS; i++) {
			struct worker *w = &workers[i];

			if (atomic_load(&w->acked) < atomic_load(&w->sent))
				inflight++;
			else if (!stopping)
				send_next(w);
		}
		if (stopping && (inflight == 0 || now_ns() > grace_end)) {
			/* Whatever is still on its way now is lost. */
			for (int i = 0; i < NWORKERS; i++) {
				struct worker *w = &workers[i];

				w->lost = atomic_load(&w->sent) - atomic_load(&w->acked);
			}
			return NULL;
		}
		syscall(SYS_futex, &acks, FUTEX_WAIT_PRIVATE, seen, &ts, NULL, 0);
	}
}

static void sleep_ms(long ms)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

int main(int argc, char **argv)
{
	long duration_ms = argc > 1 ? atol(argv[1]) : 3000;
	struct sigaction sa;
	struct itimerval it;
	pthread_t sender;
	long total = 0, bad = 0, late = 0;
	long long maxlat = 0;
	long long start;
	double secs;

	spin = argc > 2 ? atol(argv[2]) : 0;
	setvbuf(stdout, NULL, _IOLBF, 0);

	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = usr1_handler;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigaction(SIGUSR1, &sa, NULL);
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = prof_handler;
	sa.sa_flags = SA_RESTART;
	sigaction(SIGPROF, &sa, NULL);

	for (int i = 0; i < NWORKERS; i++) {
		workers[i].index = i;
		pthread_create(&workers[i].th, NULL, worker_main, &workers[i]);
	}
	memset(&it, 0, sizeof it);
	it.it_interval.tv_usec = 100;
	it.it_value.tv_usec = 100;
	setitimer(ITIMER_PROF, &it, NULL);

	for (int i = 0; i < NWORKERS; i++)
		while (!atomic_load(&workers[i].ready))
			sched_yield();
	start = now_ns();
	pthread_create(&sender, NULL, sender_main, NULL);
	sleep_ms(duration_ms);
	atomic_store(&stop_sending, 1);
	secs = (now_ns() - start) / 1e9;
	pthread_join(sender, NULL);
	atomic_store(&stop_workers, 1);
	for (int i = 0; i < NWORKERS; i++)
		pthread_join(workers[i].th, NULL);
	memset(&it, 0, sizeof it);
	setitimer(ITIMER_PROF, &it, NULL);

	for (int i = 0; i < NWORKERS; i++) {
		struct worker *w = &workers[i];

		printf("worker %d: sent %ld delivered %ld dup %ld gap %ld badinfo %ld lost %ld late %ld maxlat_us %lld calls %ld\n",
		       i, atomic_load(&w->sent), w->delivered, w->dups, w->gaps, w->badinfo,
		       w->lost, w->late, w->max_lat_ns / 1000, atomic_load(&w->calls));
		total += w->delivered;
		late += w->late;
		bad += w->dups + w->gaps + w->badinfo + w->lost;
		if (atomic_load(&w->sent) != w->delivered + w->lost)
			bad++;
		if (w->max_lat_ns > maxlat)
			maxlat = w->max_lat_ns;
	}
	printf("sigstorm: delivered %ld in %.2f s rate %.0f/s maxlat_us %lld late %ld sigprof %ld %s\n",
	       total, secs, total / secs, maxlat / 1000, late, atomic_load(&sigprof_count),
	       bad ? "FAIL" : "ok");
	sigstorm_done();
	return bad ? 1 : 0;
}
