package sluice

import (
	"bytes"
	"errors"
	"os"
	"testing"
)

// The tests run on the host backend unless SLUICE_BACKEND says otherwise, so
// the same binary (go test -c) also runs on a GPU machine with
// SLUICE_BACKEND=cuda (or auto).
func TestMain(m *testing.M) {
	if os.Getenv("SLUICE_BACKEND") == "" {
		os.Setenv("SLUICE_BACKEND", "host")
	}
	// Two host devices, for the wrong-device tests (available on every machine).
	if os.Getenv("SLUICE_HOST_DEVICES") == "" {
		os.Setenv("SLUICE_HOST_DEVICES", "2")
	}
	os.Exit(m.Run())
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// closeAtEnd fails t on err, and closes x when the test ends.
func closeAtEnd[T interface{ Close() error }](t testing.TB, x T, err error) T {
	t.Helper()
	must(t, err)
	t.Cleanup(func() { x.Close() })
	return x
}

func openDev(t testing.TB) *Device {
	t.Helper()
	d, err := OpenDefaultDevice()
	return closeAtEnd(t, d, err)
}

func testStream(t testing.TB, d *Device) *Stream {
	t.Helper()
	s, err := d.NewStream(StreamNonBlocking, 0)
	return closeAtEnd(t, s, err)
}

func alloc(t testing.TB, s *Stream, n int) *Buffer {
	t.Helper()
	b, err := s.Alloc(n)
	return closeAtEnd(t, b, err)
}

func allocPinned(t testing.TB, d *Device, n int) *PinnedBuffer {
	t.Helper()
	p, err := d.AllocPinned(n)
	return closeAtEnd(t, p, err)
}

func backendOf(t testing.TB, d *Device) Backend {
	t.Helper()
	b, err := d.Backend()
	must(t, err)
	return b
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) ^ seed
	}
	return b
}

func readBack(t testing.TB, s *Stream, m Memory, n int) []byte {
	t.Helper()
	out := make([]byte, n)
	must(t, CopyToHost(s, out, m, 0))
	return out
}

func wantBytes(t testing.TB, what string, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		t.Fatalf("%s: bytes differ at %d (len got %d, want %d)", what, i, len(got), len(want))
	}
}

func wantCode(t testing.TB, err error, target *Error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("want %v, got %v", target.Code, err)
	}
	var se *Error
	if !errors.As(err, &se) {
		t.Fatalf("%v is not an *Error", err)
	}
}

func wantClosed(t testing.TB, err error) {
	t.Helper()
	if !errors.Is(err, ErrClosed) || !errors.Is(err, ErrInvalidHandle) {
		t.Fatalf("want ErrClosed, got %v", err)
	}
}
