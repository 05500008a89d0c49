package threaddb

// staticTLSAtDlopen: x86-64 glibc gives a dlopen'ed module's TLS a block
// of its own, allocated on the thread's first use.
const staticTLSAtDlopen = false
