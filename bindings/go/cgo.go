//go:build !sluice_pkgconfig

package sluice

// Default linking: against the library built in this repository by
// `cargo build --release` (run `go generate` in this directory, or
// bindings/go/test.sh). The rpath lets binaries find the library there
// without LD_LIBRARY_PATH, under its SONAME libsluice.so.0 (the symlink that
// cdylib/build.rs makes beside libsluice.so). Build with `-tags sluice_pkgconfig` to link an
// installed library found through pkg-config instead (see README.md).

/*
#cgo CFLAGS: -I${SRCDIR}/../../include
#cgo LDFLAGS: -L${SRCDIR}/../../target/release -lsluice -Wl,-rpath,${SRCDIR}/../../target/release
*/
import "C"

//go:generate sh -c "cd ../.. && cargo build --release && ln -sf libsluice.so target/release/libsluice.so.0"
