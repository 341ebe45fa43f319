package sluice

// The names that sluice.h deprecates (SLUICE_DEPRECATED, the 0.1.0 names)
// fail the build of this package, shims.c included.

/*
#cgo CFLAGS: -Werror=deprecated-declarations
#include "sluice.h"
*/
import "C"

// ABIVersion is the C ABI version this package was written against
// (SLUICE_ABI_VERSION of the header it was compiled with).
const ABIVersion = C.SLUICE_ABI_VERSION

// Version returns the library version, "MAJOR.MINOR.PATCH".
func Version() string { return C.GoString(C.sluice_version()) }

// LibraryABIVersion returns the ABI version of the loaded library; it differs
// from ABIVersion only when an incompatible libsluice is loaded.
func LibraryABIVersion() uint32 { return uint32(C.sluice_abi_version()) }

// LiveHandles returns the number of live C handles of every type (for leak
// checks in tests).
func LiveHandles() uint64 { return uint64(C.sluice_live_handles()) }

// EngineMode is the process-wide mode of the dependency engine.
type EngineMode uint32

const (
	// EngineAsync: ops only enqueue work (the default).
	EngineAsync EngineMode = C.SLUICE_ENGINE_ASYNC
	// EngineSync: the host synchronises the stream after every tracked op
	// (debugging, A/B benchmarks).
	EngineSync EngineMode = C.SLUICE_ENGINE_SYNC
)

// SetEngineMode sets the process-wide engine mode. The initial mode comes
// from SLUICE_ENGINE=async|sync.
func SetEngineMode(m EngineMode) error {
	return takeError(C.sluice_engine_set_mode(C.uint32_t(m)))
}

// CurrentEngineMode returns the process-wide engine mode.
func CurrentEngineMode() EngineMode { return EngineMode(C.sluice_engine_mode()) }
