package threaddb

import (
	"os"
	"syscall"
)

// statInode returns the inode number of a stat result (0 if unknown).
func statInode(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}
