package sluice

import (
	"os"
	"testing"
)

func TestDevice(t *testing.T) {
	n, err := DeviceCount(BackendHost)
	must(t, err)
	if want := 1; os.Getenv("SLUICE_HOST_DEVICES") == "2" {
		want = 2
		if n != want {
			t.Fatalf("host device count %d, want %d", n, want)
		}
	} else if n < want {
		t.Fatalf("host device count %d", n)
	}
	if Version() == "" || LibraryABIVersion() != ABIVersion {
		t.Fatalf("version %q abi %d/%d", Version(), LibraryABIVersion(), ABIVersion)
	}

	d := openDev(t)
	p, err := d.Props()
	must(t, err)
	if p.Name == "" || p.TotalMemory == 0 || p.MultiprocessorCount <= 0 {
		t.Fatalf("props %+v", p)
	}
	b, err := d.Backend()
	must(t, err)
	if b != p.Backend || (b != BackendHost && b != BackendCUDA) || b.String() == "" {
		t.Fatalf("backend %v", b)
	}
	least, greatest, err := d.PriorityRange()
	must(t, err)
	if b == BackendHost && (least != 0 || greatest != 0) {
		t.Fatalf("host priority range %d %d", least, greatest)
	}
	// A priority out of range is clamped, not refused.
	s, err := d.NewStream(0, greatest-100)
	must(t, err)
	must(t, s.Close())

	// A second handle to the same device; closing one leaves the other.
	h1, err := OpenDevice(p.Backend, p.Ordinal)
	must(t, err)
	p1, err := h1.Props()
	must(t, err)
	if p1 != p {
		t.Fatalf("props differ: %+v %+v", p1, p)
	}
	must(t, h1.Close())
	must(t, h1.Close()) // idempotent
	_, err = h1.Props()
	wantClosed(t, err)
	_, err = d.Props()
	must(t, err)

	must(t, d.WaitAll())

	// The pinned pool.
	st0, err := d.PinnedStats()
	must(t, err)
	pin, err := d.AllocPinned(10000)
	must(t, err)
	st1, err := d.PinnedStats()
	must(t, err)
	if st1.BytesInUse < st0.BytesInUse+10000 {
		t.Fatalf("in use %d -> %d", st0.BytesInUse, st1.BytesInUse)
	}
	must(t, pin.Close())
	st2, err := d.PinnedStats()
	must(t, err)
	if st2.BytesCached == 0 || st2.CacheLimit == 0 {
		t.Fatalf("after free: %+v", st2)
	}
	pin, err = d.AllocPinned(10000) // served from the cache
	must(t, err)
	st3, err := d.PinnedStats()
	must(t, err)
	if st3.Hits != st2.Hits+1 {
		t.Fatalf("hits %d -> %d", st2.Hits, st3.Hits)
	}
	must(t, pin.Close())
	must(t, d.TrimPinned())
	st4, err := d.PinnedStats()
	must(t, err)
	if st4.BytesCached != 0 {
		t.Fatalf("cached after trim: %d", st4.BytesCached)
	}
	must(t, d.SetPinnedLimit(1<<20))
	st5, err := d.PinnedStats()
	must(t, err)
	if st5.CacheLimit != 1<<20 {
		t.Fatalf("limit %d", st5.CacheLimit)
	}
	must(t, d.SetPinnedLimit(st0.CacheLimit))
}

func TestEngineMode(t *testing.T) {
	old := CurrentEngineMode()
	defer SetEngineMode(old)
	d := openDev(t)
	s := testStream(t, d)
	buf := alloc(t, s, 64)

	must(t, SetEngineMode(EngineSync))
	if CurrentEngineMode() != EngineSync {
		t.Fatal("mode not set")
	}
	st0, err := s.Stats()
	must(t, err)
	must(t, Memset(s, buf, 0, 1, 64))
	st1, err := s.Stats()
	must(t, err)
	if st1.EngineSyncs <= st0.EngineSyncs {
		t.Fatalf("engine syncs %d -> %d", st0.EngineSyncs, st1.EngineSyncs)
	}
	// In sync mode the memset has completed when Memset returns.
	idle, err := s.Query()
	must(t, err)
	if !idle {
		t.Fatal("stream busy after a memset in sync mode")
	}
	must(t, SetEngineMode(EngineAsync))
	if CurrentEngineMode() != EngineAsync {
		t.Fatal("mode not reset")
	}
}

// OpenDevice converts ordinal with C.uint32_t(ordinal): an ordinal of 2^32
// (no such device) is truncated to 0 and opens host device 0.
func TestOpenDeviceOrdinalPast32Bits(t *testing.T) {
	n, err := DeviceCount(BackendHost)
	must(t, err)
	bad := 1 << 32 // > every ordinal; truncates to 0
	d, err := OpenDevice(BackendHost, bad)
	if err == nil {
		p, _ := d.Props()
		d.Close()
		t.Fatalf("OpenDevice(host, %d) with %d host devices succeeded: opened ordinal %d", bad, n, p.Ordinal)
	}
	wantCode(t, err, ErrNoDevice)
}
