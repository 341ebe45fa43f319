//go:build !sluice_pkgconfig

package sluice

// Default linking: against the library built in this repository by
// `cargo build --release` (run `go generate` in this directory, or
// bindings/go/test.sh). The rpath lets binaries find libsluice.so there
// without LD_LIBRARY_PATH. Build with `-tags sluice_pkgconfig` to link an
// installed library found through pkg-config instead (see README.md).

/*
#cgo CFLAGS: -I${SRCDIR}/../../include
#cgo LDFLAGS: -L${SRCDIR}/../../target/release -lsluice -Wl,-rpath,${SRCDIR}/../../target/release
*/
import "C"

//go:generate sh -c "cd ../.. && cargo build --release"
