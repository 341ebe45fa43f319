package sluice

import (
	"bytes"
	"fmt"
	"runtime"
	"sync"
	"testing"
)

// 64 goroutines, GOMAXPROCS > 1, a Gosched between calls so that goroutines
// hop between OS threads mid-sequence. Each does streams, buffers, copies,
// memsets, ops, callbacks and events, and checks every byte. They also share
// one device buffer (a region each, written on their own streams: the engine
// orders the writes across streams) and one stream.
func TestHammer(t *testing.T) {
	const goroutines = 64
	iters := 12
	if testing.Short() || debugGC {
		iters = 2
	}
	if runtime.GOMAXPROCS(0) < 4 {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	}
	d := openDev(t)
	sharedStream := testStream(t, d)
	const region = 256
	shared := alloc(t, sharedStream, goroutines*region)
	must(t, Memset(sharedStream, shared, 0, 0, goroutines*region))
	must(t, sharedStream.Synchronize())

	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			if err := hammerOne(d, sharedStream, shared, g, iters, region); err != nil {
				errs <- fmt.Errorf("goroutine %d: %w", g, err)
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	got := readBack(t, sharedStream, shared, goroutines*region)
	for g := 0; g < goroutines; g++ {
		want := bytes.Repeat([]byte{byte(g*3 + iters - 1)}, region)
		if !bytes.Equal(got[g*region:(g+1)*region], want) {
			t.Errorf("shared region %d: %v...", g, got[g*region:g*region+4])
		}
	}
}

func hammerOne(d *Device, sharedStream *Stream, shared *Buffer, g, iters, region int) (err error) {
	step := func(e error) {
		if err == nil && e != nil {
			err = e
		}
		runtime.Gosched()
	}
	size := 1024 + 512*(g%5)
	for it := 0; it < iters && err == nil; it++ {
		s, e := d.NewStream(0, 0)
		if e != nil {
			return e
		}
		// Half the goroutines also use the shared stream for part of the work.
		work := s
		if g%2 == 1 {
			work = sharedStream
		}
		buf, e := s.Alloc(size)
		step(e)
		pin, e := d.AllocPinned(size)
		step(e)
		if err != nil {
			return err
		}
		src := pattern(size, byte(g+it))
		step(CopyFromHost(s, buf, 0, src))
		step(Copy(work, pin, 0, buf, 0, size)) // maybe another stream: engine orders it
		step(pin.WaitRead())
		if err == nil && !bytes.Equal(pin.Bytes(), src) {
			return fmt.Errorf("iteration %d: pinned copy differs", it)
		}
		step(Memset(s, buf, 10, byte(g), 20))
		op, e := work.BeginOp([]Syncable{pin}, []Syncable{buf})
		step(e)
		if op != nil {
			step(op.End())
		}
		ran := false
		step(s.HostCallback(func() error { ran = true; return nil }, []Syncable{buf}, nil))
		ev, e := s.Record(0)
		step(e)
		out := make([]byte, size)
		step(CopyToHost(work, out, buf, 0))
		if err == nil {
			copy(src[10:30], bytes.Repeat([]byte{byte(g)}, 20))
			if !bytes.Equal(out, src) {
				return fmt.Errorf("iteration %d: device bytes differ", it)
			}
		}
		if ev != nil {
			step(ev.Synchronize())
			step(ev.Close())
		}
		if err == nil && !ran {
			return fmt.Errorf("iteration %d: callback did not run before its event", it)
		}
		// This goroutine's region of the shared buffer, written on its own stream.
		step(Memset(s, shared, g*region, byte(g*3+it), region))
		step(pin.Close())
		step(buf.Close())
		step(s.Close())
	}
	return err
}
