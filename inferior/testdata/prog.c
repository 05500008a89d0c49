/* Test program for package inferior: argv[1] selects a scenario. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

volatile int counter;
volatile long watched;
volatile int got_usr1;
char buffer[64] = "hello, inferior";

__attribute__((noinline)) void hit(int n) { __atomic_fetch_add(&counter, n, __ATOMIC_SEQ_CST); }

/* tp_nop labels a one-byte nop that tracepoint tests trap. */
__attribute__((noinline)) void tp_site(int n) {
	__asm__ volatile(".globl tp_nop\ntp_nop: nop");
	__atomic_fetch_add(&counter, n, __ATOMIC_SEQ_CST);
}

/* exit_syscall labels a raw exit_group system call instruction. */
__attribute__((noinline)) void raw_exit_group(int code) {
#if defined(__x86_64__)
	__asm__ volatile("mov $231, %%eax\n.globl exit_syscall\nexit_syscall: syscall" : : "D"(code) : "rax");
#elif defined(__aarch64__)
	register long x0 __asm__("x0") = code;
	__asm__ volatile("mov x8, #94\n.globl exit_syscall\nexit_syscall: svc #0" : : "r"(x0) : "x8");
#endif
}

/* fault_load returns *p; its load is at fault_insn. fault_recover is where
   the fault hook test sends a thread whose load faulted: it returns -1. */
long fault_load(const long *p);
#if defined(__x86_64__)
__asm__(".text\n"
        ".globl fault_load\n.type fault_load, @function\nfault_load:\n"
        ".globl fault_insn\nfault_insn: movq (%rdi), %rax\n"
        "ret\n"
        ".globl fault_recover\nfault_recover: movq $-1, %rax\n"
        "ret\n"
        ".size fault_load, .-fault_load\n");
#elif defined(__aarch64__)
__asm__(".text\n"
        ".globl fault_load\n.type fault_load, %function\nfault_load:\n"
        ".globl fault_insn\nfault_insn: ldr x0, [x0]\n"
        "ret\n"
        ".globl fault_recover\nfault_recover: mov x0, #-1\n"
        "ret\n"
        ".size fault_load, .-fault_load\n");
#endif

static void on_usr1(int sig) { (void)sig; __atomic_fetch_add(&got_usr1, 1, __ATOMIC_SEQ_CST); }

static void *self_signaller(void *arg) {
	(void)arg;
	pthread_kill(pthread_self(), SIGUSR1);
	return NULL;
}

static void *stress_worker(void *arg) {
	long id = (long)arg;
	for (int i = 0; i < 200; i++) {
		hit(1);
		if (i % 50 == (int)id) {
			pthread_kill(pthread_self(), SIGUSR1);
		}
	}
	return NULL;
}

static char *self_path;

static void *exec_from_thread(void *arg) {
	(void)arg;
	execl(self_path, self_path, "exit", (char *)NULL);
	return NULL;
}

static volatile int arrived;

/* Spin barrier: the threads leave it running, so that several of them
   reach hit at the same moment. */
static void spin_barrier(int round) {
	__atomic_fetch_add(&arrived, 1, __ATOMIC_SEQ_CST);
	while (__atomic_load_n(&arrived, __ATOMIC_SEQ_CST) < 4 * (round + 1)) {
	}
}

static void *barrier_worker(void *arg) {
	(void)arg;
	for (int i = 0; i < 50; i++) {
		spin_barrier(i);
		hit(1);
	}
	return NULL;
}

/* forks_worker: the four threads leave a spin barrier together and vfork
   at once, so that vfork events pile up while the first is reported
   (glibc's fork would serialise them: it holds its fork locks across the
   system call, and a thread stopped at its fork event keeps them). */
static void *forks_worker(void *arg) {
	(void)arg;
	spin_barrier(0);
	pid_t child = vfork();
	if (child == 0) {
		_exit(5);
	}
	int status = 0;
	waitpid(child, &status, 0);
	return (void *)(long)(WIFEXITED(status) && WEXITSTATUS(status) == 5);
}

static void *late_exit(void *arg) {
	(void)arg;
	for (int i = 0; i < 3; i++) {
		hit(1);
	}
	usleep(20000);
	exit(9);
}

static void *worker(void *arg) {
	long id = (long)arg;
	for (int i = 0; i < 5; i++) {
		hit((int)id);
	}
	return NULL;
}

static void *tp_worker(void *arg) {
	(void)arg;
	for (int i = 0; i < 100; i++) {
		tp_site(1);
	}
	return NULL;
}

static volatile long spins;

/* nop5site holds a 5-byte nop at the global label nop5_at, which
 * TestLivePatchWhileRunning patches while four threads run through it:
 * a torn instruction there would crash the program. */
__attribute__((noinline)) void nop5site(void) {
#if defined(__x86_64__)
	__asm__ volatile(".globl nop5_at\nnop5_at:\n.byte 0x0f, 0x1f, 0x44, 0x00, 0x00");
#else
	__asm__ volatile(".globl nop5_at\nnop5_at: nop");
#endif
}

static void *nop5_spinner(void *arg) {
	(void)arg;
	for (;;) {
		nop5site();
		__atomic_fetch_add(&counter, 1, __ATOMIC_SEQ_CST);
	}
	return NULL;
}

static void *spinner(void *arg) {
	(void)arg;
	for (;;) {
		__atomic_fetch_add(&spins, 1, __ATOMIC_SEQ_CST);
	}
	return NULL;
}

/* exiter ends the process from a non-leader thread while others spin. */
static void *exiter(void *arg) {
	(void)arg;
	usleep(20000);
	counter = 77;
	exit(13);
}

/* group_exiter calls exit_group (at exit_syscall) from a non-leader thread. */
static void *group_exiter(void *arg) {
	(void)arg;
	usleep(10000);
	raw_exit_group(6);
	return NULL;
}

static void *sleeper(void *arg) {
	(void)arg;
	for (;;) {
		pause();
	}
	return NULL;
}

/* sigvalues: two threads call tp_site() 20 times each; the signals tests'
   trap hook (at tp_nop) sends them SIGUSR1 and SIGRTMIN with sigqueue values. The
   handler logs each value a thread gets (-1 for a siginfo that is not a
   sigqueue's), and main prints each thread's log. */
#define SV_MAX 256
static __thread int sv_index = -1;
static int sv_log[2][SV_MAX];
static volatile int sv_n[2];

static void sv_handler(int sig, siginfo_t *si, void *uc) {
	int i = sv_index;
	(void)sig;
	(void)uc;
	if (i < 0 || sv_n[i] >= SV_MAX) {
		return;
	}
	sv_log[i][sv_n[i]] = si->si_code == SI_QUEUE ? si->si_value.sival_int : -1;
	sv_n[i]++;
}

static void *sv_worker(void *arg) {
	sv_index = (int)(long)arg;
	for (int i = 0; i < 20; i++) {
		tp_site(1);
	}
	return NULL;
}

/* raw_clone_thread makes a thread with a raw clone system call
 * (clone_syscall labels it); the thread sets clone_child_ran and exits. */
volatile int clone_child_ran;
static char clone_stack[65536] __attribute__((aligned(16)));

__attribute__((noinline)) void raw_clone_thread(void) {
	long flags = 0x50f00; /* VM|FS|FILES|SIGHAND|THREAD|SYSVSEM */
	char *sp = clone_stack + sizeof clone_stack;
#if defined(__x86_64__)
	register long r10 __asm__("r10") = 0;
	register long r8 __asm__("r8") = 0;
	__asm__ volatile("mov $56, %%eax\n"
			 ".globl clone_syscall\nclone_syscall: syscall\n"
			 "test %%rax, %%rax\n"
			 "jnz 1f\n"
			 "movl $1, clone_child_ran(%%rip)\n"
			 "mov $60, %%eax\n"
			 "xor %%edi, %%edi\n"
			 "syscall\n"
			 "1:"
			 : "+D"(flags), "+S"(sp)
			 : "d"(0), "r"(r10), "r"(r8)
			 : "rax", "rcx", "r11", "memory");
#elif defined(__aarch64__)
	register long x0 __asm__("x0") = flags;
	register long x1 __asm__("x1") = (long)sp;
	register long x2 __asm__("x2") = 0;
	register long x3 __asm__("x3") = 0;
	register long x4 __asm__("x4") = 0;
	__asm__ volatile("mov x8, #220\n"
			 ".globl clone_syscall\nclone_syscall: svc #0\n"
			 "cbnz x0, 1f\n"
			 "adrp x9, clone_child_ran\n"
			 "add x9, x9, :lo12:clone_child_ran\n"
			 "mov w10, #1\n"
			 "str w10, [x9]\n"
			 "mov x0, #0\n"
			 "mov x8, #93\n"
			 "svc #0\n"
			 "1:"
			 : "+r"(x0), "+r"(x1)
			 : "r"(x2), "r"(x3), "r"(x4)
			 : "x8", "x9", "x10", "memory");
#endif
}

int main(int argc, char **argv) {
	const char *mode = argc > 1 ? argv[1] : "exit";
	if (strcmp(mode, "exit") == 0) {
		return 42;
	}
	if (strcmp(mode, "bp") == 0) {
		for (int i = 1; i <= 3; i++) {
			hit(i);
		}
		return counter; /* 6 */
	}
	if (strcmp(mode, "threads") == 0 || strcmp(mode, "tp") == 0) {
		pthread_t t[4];
		for (long i = 0; i < 4; i++) {
			pthread_create(&t[i], NULL, mode[0] == 't' && mode[1] == 'p' ? tp_worker : worker, (void *)(i + 1));
		}
		for (int i = 0; i < 4; i++) {
			pthread_join(t[i], NULL);
		}
		return counter & 0xff;
	}
	if (strcmp(mode, "signal") == 0) {
		signal(SIGUSR1, on_usr1);
		raise(SIGUSR1);
		return got_usr1 ? 7 : 8;
	}
	if (strcmp(mode, "sigthreads") == 0) {
		pthread_t t[4];
		signal(SIGUSR1, on_usr1);
		for (int i = 0; i < 4; i++) {
			pthread_create(&t[i], NULL, self_signaller, NULL);
		}
		for (int i = 0; i < 4; i++) {
			pthread_join(t[i], NULL);
		}
		return got_usr1;
	}
	if (strcmp(mode, "stress") == 0) {
		pthread_t t[8];
		signal(SIGUSR1, on_usr1);
		for (long i = 0; i < 8; i++) {
			pthread_create(&t[i], NULL, stress_worker, (void *)i);
		}
		for (int i = 0; i < 8; i++) {
			pthread_join(t[i], NULL);
		}
		return got_usr1; /* 8 threads x 4 signals = 32 */
	}
	if (strcmp(mode, "clonestep") == 0) {
		raw_clone_thread();
		while (!clone_child_ran) {
		}
		return 7;
	}
	if (strcmp(mode, "exitgroup") == 0) {
		pthread_t t;
		pthread_create(&t, NULL, sleeper, NULL);
		usleep(10000);
		raw_exit_group(5);
	}
	if (strcmp(mode, "barrier") == 0) {
		pthread_t t[4];
		for (int i = 0; i < 4; i++) {
			pthread_create(&t[i], NULL, barrier_worker, NULL);
		}
		for (int i = 0; i < 4; i++) {
			pthread_join(t[i], NULL);
		}
		return counter; /* 200 */
	}
	if (strcmp(mode, "leaderexit") == 0) {
		pthread_t t;
		pthread_create(&t, NULL, late_exit, NULL);
		pthread_exit(NULL);
	}
	if (strcmp(mode, "watch") == 0) {
		hit(1);
		watched = 0x1234;
		return (int)(watched & 0xff); /* 0x34 */
	}
	if (strcmp(mode, "sleep") == 0) {
		pthread_t t;
		pthread_create(&t, NULL, sleeper, NULL);
		for (;;) {
			counter++;
			usleep(1000);
		}
	}
	if (strcmp(mode, "livepatch") == 0) {
		pthread_t t[4];
		for (long i = 0; i < 4; i++) {
			pthread_create(&t[i], NULL, nop5_spinner, NULL);
		}
		nop5_spinner(NULL);
	}
	if (strcmp(mode, "spin") == 0) {
		for (;;) {
			counter++;
		}
	}
	if (strcmp(mode, "fork") == 0) {
		int status = 0;
		pid_t child = fork();
		if (child == 0) {
			hit(1); /* must not trap: the stub removes its int3s in the child */
			_exit(3);
		}
		waitpid(child, &status, 0);
		hit(2);
		return WIFEXITED(status) && WEXITSTATUS(status) == 3 ? 11 : 12;
	}
	if (strcmp(mode, "forks4") == 0) {
		pthread_t t[4];
		int ok = 0;
		for (int i = 0; i < 4; i++) {
			pthread_create(&t[i], NULL, forks_worker, NULL);
		}
		for (int i = 0; i < 4; i++) {
			void *r;
			pthread_join(t[i], &r);
			ok += (int)(long)r;
		}
		return ok == 4 ? 15 : 16;
	}
	if (strcmp(mode, "vfork") == 0) {
		int status = 0;
		pid_t child = vfork();
		if (child == 0) {
			_exit(4);
		}
		waitpid(child, &status, 0);
		hit(2);
		return WIFEXITED(status) && WEXITSTATUS(status) == 4 ? 13 : 14;
	}
	if (strcmp(mode, "fault") == 0) {
		/* Reads through a function pointer from an unmapped address. */
		long (*volatile load)(const long *) = fault_load;
		long v = load((const long *)16);
		printf("fault_load: %ld\n", v);
		return v == -1 ? 21 : 22;
	}
	if (strcmp(mode, "threadexec") == 0) {
		pthread_t t;
		self_path = argv[0];
		pthread_create(&t, NULL, exec_from_thread, NULL);
		for (;;) {
			pause();
		}
	}
	if (strcmp(mode, "threadexit") == 0) {
		pthread_t t[3];
		pthread_create(&t[0], NULL, spinner, NULL);
		pthread_create(&t[1], NULL, spinner, NULL);
		pthread_create(&t[2], NULL, exiter, NULL);
		pthread_join(t[2], NULL);
		return 99;
	}
	if (strcmp(mode, "threadexitgroup") == 0) {
		pthread_t t;
		pthread_create(&t, NULL, group_exiter, NULL);
		for (;;) {
			pause();
		}
	}
	if (strcmp(mode, "sigvalues") == 0) {
		struct sigaction sa;
		pthread_t t[2];
		memset(&sa, 0, sizeof sa);
		sa.sa_sigaction = sv_handler;
		sa.sa_flags = SA_SIGINFO;
		sigaction(SIGUSR1, &sa, NULL);
		sigaction(SIGRTMIN, &sa, NULL);
		for (long i = 0; i < 2; i++) {
			pthread_create(&t[i], NULL, sv_worker, (void *)i);
		}
		for (int i = 0; i < 2; i++) {
			pthread_join(t[i], NULL);
		}
		for (int i = 0; i < 2; i++) {
			printf("sv%d:", i);
			for (int j = 0; j < sv_n[i]; j++) {
				printf(" %d", sv_log[i][j]);
			}
			printf("\n");
		}
		return 0;
	}
	if (strcmp(mode, "exec") == 0) {
		execl(argv[0], argv[0], "exit", (char *)NULL);
		return 99;
	}
	return 100;
}
