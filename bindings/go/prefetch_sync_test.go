// The sync objects of a prefetched batch, and the order a lease gives the
// work on the consumer stream.

package sluice

import (
	"errors"
	"hash/crc32"
	"sync/atomic"
	"testing"
	"time"
)

// The sync objects of a batch belong to the prefetcher: they order work on
// other streams after the batch's copy, their Close does nothing, and they
// are closed with the prefetcher.
func TestPrefetcherBatchSync(t *testing.T) {
	d := openDev(t)
	s := testStream(t, d)
	other := testStream(t, d)
	p := newPrefetcher(t, d, PrefetcherConfig{Depth: 2, Capacities: testCaps})
	must(t, pushN(p, 0, 2))
	b, err := p.Next(s, time.Second)
	must(t, err)
	o := b.Sync(0)
	must(t, o.Close())
	info, err := o.Info()
	must(t, err)
	if !info.HasWriter {
		t.Fatalf("sync info %+v: the batch's copy is not its writer", info)
	}
	// A host callback (a stand-in kernel) on another stream that names the
	// segment's sync object runs after the batch's copy.
	if backendOf(t, d) == BackendHost {
		seg, err := b.HostBytes(0)
		must(t, err)
		var ok atomic.Bool
		must(t, other.HostCallback(func() error {
			ok.Store(crc32.ChecksumIEEE(seg) == prefetchSum(0, 0))
			return nil
		}, []Syncable{b.Sync(0)}, nil))
		must(t, other.Synchronize())
		if !ok.Load() {
			t.Fatal("the other stream read the segment before its copy")
		}
	} else {
		_, err := b.HostBytes(0)
		wantCode(t, err, ErrUnsupported)
	}
	must(t, b.Release())
	b2, err := p.Next(s, time.Second)
	must(t, err)
	if b2.Sync(0) == o {
		t.Fatal("two slots share a sync object")
	}
	must(t, b2.Release())
	must(t, p.Close())
	_, err = o.Info()
	wantClosed(t, err)
	wantClosed(t, o.WaitRead())
}

// Work on the consumer stream between Next and Release that names no sync
// object still runs after the batch's copy and before the slot's next copy
// (Batch.Sync's doc): at depth 2 the producer refills each slot two batches
// later, and a host callback that dawdles must still see its own batch.
func TestPrefetcherLeaseOrdersUnnamedWork(t *testing.T) {
	d := openDev(t)
	if backendOf(t, d) != BackendHost {
		t.Skip("reads the segments from host callbacks: host backend")
	}
	s := testStream(t, d)
	n := debugScaled(2000, 40)
	p := newPrefetcher(t, d, PrefetcherConfig{Depth: 2, Capacities: testCaps})
	produced := make(chan error, 1)
	go func() { produced <- errors.Join(pushN(p, 0, n), p.CloseInput()) }()
	var bad atomic.Int64
	for seq := uint64(0); seq < n; seq++ {
		b, err := p.Next(s, WaitForever)
		must(t, err)
		seg0, err := b.HostBytes(0)
		must(t, err)
		seg1, err := b.HostBytes(1)
		must(t, err)
		must(t, s.HostCallback(func() error {
			if seq%16 == 0 {
				time.Sleep(200 * time.Microsecond)
			}
			if crc32.ChecksumIEEE(seg0) != prefetchSum(seq, 0) || crc32.ChecksumIEEE(seg1) != prefetchSum(seq, 1) {
				bad.Add(1)
			}
			return nil
		}, nil, nil))
		must(t, b.Release())
	}
	must(t, <-produced)
	must(t, s.Synchronize())
	if bad.Load() != 0 {
		t.Fatalf("%d of %d batches read with another batch's bytes", bad.Load(), n)
	}
}
