package main

import (
	"syscall"
	"unsafe"
)

// hugePageBytes returns n zeroed bytes of anonymous memory that the kernel is
// asked to back with 2 MiB pages (madvise MADV_HUGEPAGE), or nil where that
// fails. The producers gather a batch's rows from all over the training set,
// one TLB miss per row on 4 KiB pages. The memory is never unmapped: the
// dataset lives as long as the process.
func hugePageBytes(n int) []byte {
	const huge = 2 << 20
	size := (n + huge - 1) &^ (huge - 1)
	b, err := syscall.Mmap(-1, 0, size+huge, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil
	}
	off := (huge - int(uintptr(unsafe.Pointer(&b[0]))&(huge-1))) & (huge - 1)
	b = b[off : off+size]
	if err := syscall.Madvise(b, syscall.MADV_HUGEPAGE); err != nil {
		return nil
	}
	return b[:n:n]
}
