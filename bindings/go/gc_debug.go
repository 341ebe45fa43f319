//go:build sluice_debug

package sluice

import "runtime"

// debugGC is true in builds with the sluice_debug tag: every handle accessor
// forces a garbage collection, so a missing runtime.KeepAlive (a wrapper
// collected, and its handle destroyed, while a C call still uses it) shows up
// as a test failure instead of a rare flake.
const debugGC = true

func maybeGC() { runtime.GC() }
