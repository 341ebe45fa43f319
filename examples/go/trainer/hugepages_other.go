//go:build !linux

package main

// hugePageBytes is nil where huge pages are not asked for (see the Linux version).
func hugePageBytes(int) []byte { return nil }
