//go:build sluice_pkgconfig

package sluice

// Linking against an installed library: `pkg-config --cflags --libs sluice`
// must give the include directory of sluice.h and -lsluice (see README.md).

/*
#cgo pkg-config: sluice
*/
import "C"
