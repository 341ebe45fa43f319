//go:build !sluice_debug

package sluice

// debugGC is false in normal builds; see gc_debug.go.
const debugGC = false

func maybeGC() {}
