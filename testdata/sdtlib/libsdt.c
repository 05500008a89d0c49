/* libsdt.c: a shared library with an SDT marker guarded by a semaphore
 * (e2e TestStaticTracepointInSharedLibrary): libsdt:work fires only
 * while a tracer has raised libsdt_work_semaphore. */
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>

__extension__ unsigned short libsdt_work_semaphore
	__attribute__((unused)) __attribute__((section(".probes")));

int lib_work(int i)
{
	if (__builtin_expect(libsdt_work_semaphore, 0)) {
		STAP_PROBE2(libsdt, work, i, i * i);
		return 1;
	}
	return 0;
}
