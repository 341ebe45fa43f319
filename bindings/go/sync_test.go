package sluice

import (
	"testing"
)

func TestSyncObjectsAndOps(t *testing.T) {
	d := openDev(t)
	a := testStream(t, d)
	b := testStream(t, d)

	obj, err := NewSyncObject()
	must(t, err)
	defer obj.Close()
	in, err := obj.Info()
	must(t, err)
	if in.ID == 0 || in.Readers != 0 || in.HasWriter {
		t.Fatalf("new object %+v", in)
	}
	must(t, obj.WaitRead())
	must(t, obj.WaitWrite())

	// A foreign op writing obj on a, then one reading it on b.
	op, err := a.BeginOp(nil, []Syncable{obj})
	must(t, err)
	if op.Stream() != a {
		t.Fatal("op stream")
	}
	raw, err := a.Raw()
	must(t, err)
	_ = raw // foreign work would be enqueued on raw here
	must(t, op.End())
	wantClosed(t, op.End()) // consumed
	must(t, op.Close())     // idempotent after End
	in, err = obj.Info()
	must(t, err)
	if !in.HasWriter || in.Readers != 0 {
		t.Fatalf("after write %+v", in)
	}
	st0, err := b.Stats()
	must(t, err)
	op, err = b.BeginOp([]Syncable{obj}, nil)
	must(t, err)
	must(t, op.Close()) // Close ends an open op
	must(t, op.Close())
	st1, err := b.Stats()
	must(t, err)
	if st1.Waits != st0.Waits+1 {
		t.Fatalf("read after write on another stream: waits %d -> %d", st0.Waits, st1.Waits)
	}
	in, err = obj.Info()
	must(t, err)
	if !in.HasWriter || in.Readers != 1 {
		t.Fatalf("after read %+v", in)
	}
	must(t, obj.WaitRead())
	must(t, obj.WaitWrite())

	// A buffer's sync object belongs to the buffer.
	buf := alloc(t, a, 64)
	so, err := buf.Sync()
	must(t, err)
	so2, err := buf.Sync()
	must(t, err)
	if so != so2 {
		t.Fatal("buffer sync object not cached")
	}
	must(t, so.Close()) // no-op: owned by the buffer
	must(t, Memset(a, buf, 0, 1, 64))
	in, err = so.Info()
	must(t, err)
	if !in.HasWriter {
		t.Fatal("memset did not record a writer on the buffer's sync object")
	}
	must(t, buf.WaitRead())
	must(t, buf.WaitWrite())
	must(t, buf.Close())
	_, err = so.Info()
	wantClosed(t, err)

	// nil entries are refused before the library is called.
	_, err = a.BeginOp([]Syncable{nil}, nil)
	wantCode(t, err, ErrNullArgument)
	// Closed objects in a set.
	must(t, obj.Close())
	must(t, obj.Close())
	_, err = a.BeginOp([]Syncable{obj}, nil)
	wantClosed(t, err)
	wantClosed(t, a.HostCallback(func() error { return nil }, nil, []Syncable{obj}))
}

// An op that is never ended is ended by its cleanup once unreachable.
func TestOpCleanupEndsOp(t *testing.T) {
	d := openDev(t)
	s := testStream(t, d)
	obj, err := NewSyncObject()
	must(t, err)
	defer obj.Close()
	func() {
		_, err := s.BeginOp(nil, []Syncable{obj})
		must(t, err)
	}()
	waitFor(t, "op cleanup", func() bool {
		in, err := obj.Info()
		must(t, err)
		return in.HasWriter
	})
}
