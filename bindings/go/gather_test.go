package sluice

import (
	"bytes"
	"sync/atomic"
	"testing"
	"time"
)

// GatherRows writes the rows named into a slot, and the batch carries them;
// bad rows, sizes and overlaps give an error and write nothing.
func TestGatherRows(t *testing.T) {
	const row, srcRows = 784, 50
	src := pattern(row*srcRows, 3)
	rows := []int{49, 0, 7, 7, 31, 1, 48, 20, 2}
	want := make([]byte, 0, len(rows)*row)
	for _, r := range rows {
		want = append(want, src[r*row:(r+1)*row]...)
	}

	d := openDev(t)
	s := testStream(t, d)
	p := newPrefetcher(t, d, PrefetcherConfig{Depth: 2, Capacities: []int{len(want) + 1}})
	dst := []*Buffer{alloc(t, s, len(want)+1)}
	for off := range 2 { // an aligned and a misaligned destination
		sl, err := p.Acquire(time.Second)
		must(t, err)
		must(t, GatherRows(sl.Segment(0)[off:], src, row, rows))
		sl.SetLen(0, off+len(want))
		must(t, sl.Submit())
		_, err = p.NextInto(s, dst, time.Second)
		must(t, err)
		wantBytes(t, "gathered rows", readBack(t, s, dst[0], off+len(want))[off:], want)
	}
	// Slot.GatherRows sets the length too; a refused gather keeps it.
	sl, err := p.Acquire(time.Second)
	must(t, err)
	sl.SetLen(0, 3)
	wantCode(t, sl.GatherRows(0, src, row, []int{srcRows}), ErrOutOfRange)
	if sl.c.len[0] != 3 {
		t.Fatalf("a refused Slot.GatherRows set the length to %d", sl.c.len[0])
	}
	must(t, sl.GatherRows(0, src, row, rows))
	must(t, sl.Submit())
	info, err := p.NextInto(s, dst, time.Second)
	must(t, err)
	if info.Lens[0] != len(want) {
		t.Fatalf("Slot.GatherRows: length %d, want %d", info.Lens[0], len(want))
	}
	wantBytes(t, "Slot.GatherRows", readBack(t, s, dst[0], len(want)), want)

	// Fill.GatherRows in a pull-mode Fill function, and after it returned.
	var kept atomic.Pointer[Fill] // read after the Fill function returned
	pull := newPrefetcher(t, d, PrefetcherConfig{Depth: 2, Capacities: []int{len(want)}, Fill: func(f *Fill) error {
		if f.Seq > 0 {
			return ErrEndOfInput
		}
		kept.Store(f)
		return f.GatherRows(0, src, row, rows)
	}})
	info, err = pull.NextInto(s, dst[:1], 5*time.Second)
	must(t, err)
	if info.Lens[0] != len(want) {
		t.Fatalf("Fill.GatherRows: length %d, want %d", info.Lens[0], len(want))
	}
	wantBytes(t, "Fill.GatherRows", readBack(t, s, dst[0], len(want)), want)
	wantCode(t, kept.Load().GatherRows(0, src, row, rows), ErrInvalidState)

	buf := bytes.Repeat([]byte{0xEE}, len(want))
	for _, c := range []struct {
		dst, src []byte
		row      int
		rows     []int
		code     *Error
	}{
		{buf, src, row, []int{0, srcRows}, ErrOutOfRange},
		{buf, src, row, []int{-1}, ErrOutOfRange},
		{buf[:len(want)-1], src, row, rows, ErrOutOfRange},
		{buf, src, 0, rows, ErrInvalidArgument},
		{buf, src, -row, rows, ErrInvalidArgument},
		{src[row:], src, row, rows, ErrInvalidArgument},
	} {
		wantCode(t, GatherRows(c.dst, c.src, c.row, c.rows), c.code)
	}
	if !bytes.Equal(buf, bytes.Repeat([]byte{0xEE}, len(want))) {
		t.Fatal("a failed GatherRows wrote into dst")
	}
	must(t, GatherRows(nil, nil, row, nil))
	wantCode(t, GatherRows(nil, nil, 0, nil), ErrInvalidArgument) // as C: row_bytes 0
}

// GatherRows makes no Go allocation.
func TestGatherRowsAllocs(t *testing.T) {
	src, dst := pattern(784*10, 1), make([]byte, 784*4)
	rows := []int{9, 0, 3, 3}
	if n := testing.AllocsPerRun(100, func() { _ = GatherRows(dst, src, 784, rows) }); n != 0 {
		t.Fatalf("%v allocations per call", n)
	}
}

// FuzzGatherRows checks GatherRows against a Go model: the rows named, in
// order, or an error with dst untouched.
func FuzzGatherRows(f *testing.F) {
	f.Add([]byte("0123456789abcdef0123456789abcdef"), uint8(16), []byte{1, 0, 1}, uint8(0), uint16(64))
	f.Add([]byte("0123456789"), uint8(3), []byte{2, 9}, uint8(1), uint16(5))
	f.Fuzz(func(t *testing.T, src []byte, rowBytes uint8, idx []byte, off uint8, capacity uint16) {
		row := int(rowBytes)
		rows := make([]int, len(idx))
		for i, b := range idx {
			rows[i] = int(int8(b)) // some negative
		}
		buf := bytes.Repeat([]byte{0xEE}, int(off%17)+int(capacity))
		dst := buf[off%17:]
		err := GatherRows(dst, src, row, rows)
		ok := row > 0 && len(rows)*row <= len(dst)
		for _, r := range rows {
			ok = ok && r >= 0 && (r+1)*row <= len(src)
		}
		if ok != (err == nil) {
			t.Fatalf("row %d rows %v dst %d src %d: err %v, want ok=%v", row, rows, len(dst), len(src), err, ok)
		}
		want := bytes.Repeat([]byte{0xEE}, len(buf))
		if ok {
			for i, r := range rows {
				copy(want[int(off%17)+i*row:], src[r*row:(r+1)*row])
			}
		}
		if !bytes.Equal(buf, want) {
			t.Fatalf("row %d rows %v: dst holds %x, want %x", row, rows, buf, want)
		}
	})
}
