// sdtthrow.cc: a C++ program that throws, for libstdc++'s own SDT marker
// libstdcxx:throw (e2e TestStaticTracepointInLibrary).
#include <cstdio>
#include <stdexcept>

__attribute__((noinline)) void done() { __asm__ volatile(""); }

int main()
{
	int caught = 0;
	for (int i = 0; i < 3; i++) {
		try {
			throw std::runtime_error("boom");
		} catch (const std::exception &) {
			caught++;
		}
	}
	done();
	std::printf("caught %d\n", caught);
	return 0;
}
