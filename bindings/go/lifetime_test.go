package sluice

import (
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"
	"unsafe"
)

// Every method of every type returns ErrClosed after Close, and Close is
// idempotent.
func TestUseAfterClose(t *testing.T) {
	d, err := OpenDefaultDevice()
	must(t, err)
	live := openDev(t) // a device that stays open, for calls that need one
	s := testStream(t, live)

	ds, err := d.NewStream(0, 0)
	must(t, err)
	defer ds.Close()
	must(t, d.Close())
	must(t, d.Close())
	for name, call := range map[string]func() error{
		"Props":          func() error { _, err := d.Props(); return err },
		"PriorityRange":  func() error { _, _, err := d.PriorityRange(); return err },
		"WaitAll":        d.WaitAll,
		"PinnedStats":    func() error { _, err := d.PinnedStats(); return err },
		"TrimPinned":     d.TrimPinned,
		"SetPinnedLimit": func() error { return d.SetPinnedLimit(1) },
		"NewStream":      func() error { _, err := d.NewStream(0, 0); return err },
		"WrapStream":     func() error { _, err := d.WrapStream(nil); return err },
		"AllocPinned":    func() error { _, err := d.AllocPinned(1); return err },
		"AllocHost":      func() error { _, err := d.AllocHost(1); return err },
		"RegisterHost":   func() error { _, err := d.RegisterHost(nil, 1); return err },
		"LoadModule":     func() error { _, err := d.LoadModule([]byte("x")); return err },
	} {
		t.Run("Device."+name, func(t *testing.T) { wantClosed(t, call()) })
	}
	// Objects of a closed device handle stay valid.
	must(t, ds.Synchronize())

	cs, err := live.NewStream(0, 0)
	must(t, err)
	ev, err := s.Record(0)
	must(t, err)
	must(t, cs.Close())
	must(t, cs.Close())
	buf := alloc(t, s, 16)
	for name, call := range map[string]func() error{
		"Raw":          func() error { _, err := cs.Raw(); return err },
		"Query":        func() error { _, err := cs.Query(); return err },
		"Synchronize":  cs.Synchronize,
		"SetLabel":     func() error { return cs.SetLabel("x") },
		"Stats":        func() error { _, err := cs.Stats(); return err },
		"HostCallback": func() error { return cs.HostCallback(func() error { return nil }, nil, nil) },
		"Record":       func() error { _, err := cs.Record(0); return err },
		"WaitEvent":    func() error { return cs.WaitEvent(ev) },
		"Alloc":        func() error { _, err := cs.Alloc(1); return err },
		"BeginOp":      func() error { _, err := cs.BeginOp(nil, nil); return err },
		"Copy":         func() error { return Copy(cs, buf, 0, buf, 8, 8) },
		"CopyFromHost": func() error { return CopyFromHost(cs, buf, 0, []byte{1}) },
		"CopyToHost":   func() error { return CopyToHost(cs, make([]byte, 1), buf, 0) },
		"Memset":       func() error { return Memset(cs, buf, 0, 0, 1) },
	} {
		t.Run("Stream."+name, func(t *testing.T) { wantClosed(t, call()) })
	}

	must(t, ev.Close())
	must(t, ev.Close())
	ev2, err := s.Record(EventTiming)
	must(t, err)
	defer ev2.Close()
	for name, call := range map[string]func() error{
		"Query":       func() error { _, err := ev.Query(); return err },
		"Synchronize": ev.Synchronize,
		"Sequence":    func() error { _, _, err := ev.Sequence(); return err },
		"Elapsed":     func() error { _, err := ElapsedTime(ev2, ev); return err },
		"WaitEvent":   func() error { return s.WaitEvent(ev) },
	} {
		t.Run("Event."+name, func(t *testing.T) { wantClosed(t, call()) })
	}

	b, err := s.Alloc(64)
	must(t, err)
	p, err := live.AllocPinned(64)
	must(t, err)
	h, err := live.AllocHost(64)
	must(t, err)
	for _, m := range []Memory{b, p, h} {
		c := m.(interface{ Close() error })
		must(t, c.Close())
		must(t, c.Close())
	}
	if p.Bytes() != nil || h.Bytes() != nil {
		t.Fatal("Bytes after Close")
	}
	for name, call := range map[string]func() error{
		"Info":          func() error { _, err := b.Info(); return err },
		"Sync":          func() error { _, err := p.Sync(); return err },
		"WaitRead":      h.WaitRead,
		"WaitWrite":     b.WaitWrite,
		"HostBytes":     func() error { _, err := b.HostBytes(); return err },
		"Copy(dst)":     func() error { return Copy(s, b, 0, buf, 0, 1) },
		"Copy(src)":     func() error { return Copy(s, buf, 0, p, 0, 1) },
		"CopyFromHost":  func() error { return CopyFromHost(s, h, 0, []byte{1}) },
		"CopyToHost":    func() error { return CopyToHost(s, make([]byte, 1), b, 0) },
		"Memset":        func() error { return Memset(s, p, 0, 0, 1) },
		"BeginOp":       func() error { _, err := s.BeginOp([]Syncable{b}, nil); return err },
		"HostCallback":  func() error { return s.HostCallback(func() error { return nil }, []Syncable{p}, nil) },
		"Launch(param)": func() error { return putArg("Launch", 0, b, unsafe.Pointer(new(uint64))) },
	} {
		t.Run("Buffer."+name, func(t *testing.T) { wantClosed(t, call()) })
	}

	o, err := NewSyncObject()
	must(t, err)
	must(t, o.Close())
	must(t, o.Close())
	for name, call := range map[string]func() error{
		"Info":      func() error { _, err := o.Info(); return err },
		"WaitRead":  o.WaitRead,
		"WaitWrite": o.WaitWrite,
	} {
		t.Run("SyncObject."+name, func(t *testing.T) { wantClosed(t, call()) })
	}

	op, err := s.BeginOp(nil, nil)
	must(t, err)
	must(t, op.End())
	wantClosed(t, op.End())
	must(t, op.Close())
	must(t, s.Synchronize())
}

// Wrappers dropped without Close release their handles through cleanups.
func TestCleanupsReleaseHandles(t *testing.T) {
	d := openDev(t)
	settle := func() uint64 {
		var n uint64
		for i := 0; i < 5; i++ {
			runtime.GC()
			time.Sleep(5 * time.Millisecond)
			n = LiveHandles()
		}
		return n
	}
	base := settle()
	func() {
		for i := 0; i < 10; i++ {
			s, err := d.NewStream(0, 0)
			must(t, err)
			b, err := s.Alloc(128)
			must(t, err)
			_, err = b.Sync()
			must(t, err)
			_, err = d.AllocPinned(128)
			must(t, err)
			_, err = d.AllocHost(128)
			must(t, err)
			_, err = s.Record(0)
			must(t, err)
			_, err = NewSyncObject()
			must(t, err)
			_, err = OpenDefaultDevice()
			must(t, err)
		}
	}()
	// (In sluice_debug builds the accessors' GCs already collect most of them.)
	if !debugGC && LiveHandles() < base+80 {
		t.Fatalf("live handles %d, base %d", LiveHandles(), base)
	}
	waitFor(t, "cleanups", func() bool { return LiveHandles() <= base })
}

// Children keep their parents alive: a stream whose Device wrapper is
// unreachable still works, and so does an event of an unreachable stream.
func TestChildrenKeepParentsAlive(t *testing.T) {
	mk := func() *Event {
		d, err := OpenDefaultDevice()
		must(t, err)
		s, err := d.NewStream(0, 0)
		must(t, err)
		ev, err := s.Record(0)
		must(t, err)
		return ev
	}
	ev := mk()
	for i := 0; i < 3; i++ {
		runtime.GC()
	}
	s := ev.Stream()
	must(t, s.Synchronize())
	_, err := s.Device().Props()
	must(t, err)
	buf, err := s.Alloc(32)
	must(t, err)
	must(t, CopyFromHost(s, buf, 0, pattern(32, 4)))
	wantBytes(t, "child of collected parents", readBack(t, s, buf, 32), pattern(32, 4))
	must(t, buf.Close())
	must(t, ev.Close())
}

// Close racing with use: every call either works or reports ErrClosed.
func TestCloseRacesWithUse(t *testing.T) {
	d := openDev(t)
	for round := 0; round < 20; round++ {
		s, err := d.NewStream(0, 0)
		must(t, err)
		b, err := s.Alloc(256)
		must(t, err)
		var wg sync.WaitGroup
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 50; i++ {
					for _, err := range []error{
						CopyFromHost(s, b, 0, pattern(256, 1)),
						Memset(s, b, 0, 1, 16),
						s.Synchronize(),
					} {
						if err != nil && !errors.Is(err, ErrClosed) {
							t.Errorf("want nil or ErrClosed, got %v", err)
						}
					}
					runtime.Gosched()
				}
			}()
		}
		runtime.Gosched()
		b.Close()
		s.Close()
		wg.Wait()
	}
}
