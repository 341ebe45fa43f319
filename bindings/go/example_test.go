package sluice_test

import (
	"errors"
	"fmt"
	"log"

	sluice "github.com/sluice-rt/sluice/bindings/go"
)

// A copy on one stream and a read of its result on another: the second
// stream waits for the first on the device, with no host synchronisation.
func Example() {
	dev, err := sluice.OpenDefaultDevice()
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()
	copyStream, err := dev.NewStream(sluice.StreamNonBlocking, 0)
	if err != nil {
		log.Fatal(err)
	}
	defer copyStream.Close()
	compute, err := dev.NewStream(sluice.StreamNonBlocking, 0)
	if err != nil {
		log.Fatal(err)
	}
	defer compute.Close()

	// Pinned staging memory, filled from Go through its []byte view.
	staging, err := dev.AllocPinned(4 * 4)
	if err != nil {
		log.Fatal(err)
	}
	defer staging.Close()
	copy(sluice.SliceOf[float32](staging.Bytes()), []float32{1, 2, 3, 4})

	x, err := copyStream.Alloc(4 * 4)
	if err != nil {
		log.Fatal(err)
	}
	defer x.Close()
	// Host to device, asynchronous: staging is C memory.
	if err := sluice.Copy(copyStream, x, 0, staging, 0, 16); err != nil {
		log.Fatal(err)
	}
	// Read on the compute stream: ordered after the copy by x's sync object.
	out := make([]float32, 4)
	if err := sluice.CopyToHostSlice(compute, out, x, 0); err != nil {
		log.Fatal(err)
	}
	st, _ := compute.Stats()
	fmt.Println(out, "waits:", st.Waits)
	// Output: [1 2 3 4] waits: 1
}

// Errors carry a stable code that errors.Is understands.
func ExampleError() {
	dev, err := sluice.OpenDefaultDevice()
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()
	s, err := dev.NewStream(0, 0)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	buf, err := s.Alloc(8)
	if err != nil {
		log.Fatal(err)
	}
	buf.Close()
	err = sluice.Memset(s, buf, 0, 0, 8)
	fmt.Println(errors.Is(err, sluice.ErrClosed), errors.Is(err, sluice.ErrInvalidHandle))

	b2, _ := s.Alloc(8)
	defer b2.Close()
	err = sluice.Memset(s, b2, 4, 0, 8)
	var se *sluice.Error
	fmt.Println(errors.Is(err, sluice.ErrOutOfRange), errors.As(err, &se) && se.Code == sluice.CodeOutOfRange)
	// Output:
	// true true
	// true true
}
