/* threads.c: NTHREADS threads each call hit() HITS_PER_THREAD times.
 *
 * Usage: threads [NTHREADS [HITS_PER_THREAD [PAUSE_EVERY]]] (defaults 4,
 * 5 and 0). With PAUSE_EVERY > 0 a worker sleeps 2 ms after every
 * PAUSE_EVERY hits.
 * hit() bumps a global atomic counter; main prints the total after
 * joining every thread and then calls threads_done(). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define MAX_THREADS 64

int hits_per_thread = 5;
int pause_every;
int total_hits;			/* updated atomically */
pthread_barrier_t start_barrier;

void hit(int id)
{
	__atomic_add_fetch(&total_hits, 1, __ATOMIC_SEQ_CST);
	(void)id;
}

void all_started(void)
{
}

void threads_done(void)
{
}

static void *worker(void *arg)
{
	int id = (int)(long)arg;
	int i;

	pthread_barrier_wait(&start_barrier);
	for (i = 0; i < hits_per_thread; i++) {
		hit(id);
		if (pause_every > 0 && (i + 1) % pause_every == 0)
			usleep(2000);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t tids[MAX_THREADS];
	int nthreads = 4;
	int i;

	setvbuf(stdout, NULL, _IONBF, 0);
	if (argc > 1)
		nthreads = atoi(argv[1]);
	if (argc > 2)
		hits_per_thread = atoi(argv[2]);
	if (argc > 3)
		pause_every = atoi(argv[3]);
	if (nthreads < 1 || nthreads > MAX_THREADS || hits_per_thread < 0) {
		fprintf(stderr, "usage: threads [1..%d [HITS]]\n", MAX_THREADS);
		return 2;
	}
	/* Every worker waits here with main, so all threads exist at once. */
	pthread_barrier_init(&start_barrier, NULL, nthreads + 1);
	for (i = 0; i < nthreads; i++)
		pthread_create(&tids[i], NULL, worker, (void *)(long)(i + 1));
	all_started();
	pthread_barrier_wait(&start_barrier);
	for (i = 0; i < nthreads; i++)
		pthread_join(tids[i], NULL);
	printf("total hits %d\n", total_hits);
	threads_done();
	return 0;
}
