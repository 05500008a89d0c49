// Package e2e holds end-to-end tests that drive the real gdb (/usr/bin/gdb)
// against a remote stub: gotpstub built from ./cmd/gotpstub, or the program
// named by the environment variable GOTPSTUB_STUB (for example
// /usr/bin/gdbserver, which is how the tests themselves are validated).
//
// The package has no non-test code besides this comment; the tests build
// the C programs of ../testdata with gcc into temporary directories, start
// the stub on a free localhost port (20000 and up, so they never collide
// with GDB's testsuite, which uses 2346 and up) and assert on gdb's output.
package e2e
