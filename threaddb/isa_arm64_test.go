package threaddb

// staticTLSAtDlopen: aarch64 glibc may place a dlopen'ed module's TLS in
// the static TLS surplus, which every thread has from the start.
const staticTLSAtDlopen = true
