package main

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestCheckpointSections: a checkpoint with a dropout mask drawn ahead reads
// back equal, and section lengths past the end, or bytes after the last
// section, are refused with the section named even under a valid CRC32C.
func TestCheckpointSections(t *testing.T) {
	c := &checkpoint{hdr: ckptHeader{Hidden: 2, Batch: 4, Train: 8}, params: []float32{1, 2, 3},
		momentum: []float32{4, 5, 6}, rng: []byte("rng bytes"), dropMask: []byte{0xa5, 0x5a, 0xff, 0}}
	good := c.marshal()
	dir := t.TempDir()
	load := func(b []byte) (*checkpoint, error) {
		p := filepath.Join(dir, "c.ckpt")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return loadCheckpoint(p)
	}
	got, err := load(good)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.params, c.params) || !slices.Equal(got.momentum, c.momentum) ||
		!bytes.Equal(got.rng, c.rng) || !bytes.Equal(got.dropMask, c.dropMask) || got.hdr.Version != ckptVersion {
		t.Fatalf("read back %+v, wrote %+v", got, c)
	}
	// The mask's length field: 8 bytes before the mask, the mask 4 before the CRC.
	at := len(good) - 4 - len(c.dropMask) - 8
	resealed := func(edit func(b []byte) []byte) []byte {
		b := edit(slices.Clone(good[:len(good)-4]))
		return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	}
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"mask longer than the file", resealed(func(b []byte) []byte {
			binary.LittleEndian.PutUint64(b[at:], 1000)
			return b
		}), "dropout mask of 1000 bytes, 4 left"},
		{"bytes after the mask", resealed(func(b []byte) []byte { return append(b, 7) }), "1 bytes after the dropout mask"},
		{"a flipped bit", func() []byte { b := slices.Clone(good); b[at] ^= 1; return b }(), "CRC32C"},
	} {
		if _, err := load(tc.b); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %q", tc.name, err, tc.want)
		}
	}
}

// TestMaskAheadCheckpoint (cuda, the warpgroup-MMA step): the checkpoint
// holds the next step's dropout mask, and a run that would draw its dropout
// itself (-gemm bf16) refuses it instead of skipping those draws.
func TestMaskAheadCheckpoint(t *testing.T) {
	if os.Getenv("SLUICE_BACKEND") != "cuda" {
		t.Skip("cuda only: the host backend draws no mask ahead")
	}
	ck := filepath.Join(t.TempDir(), "a.ckpt")
	out := trainer(t, "-epochs", "1", "-save", ck)
	if !strings.Contains(out, "warpgroup-MMA GEMMs agree") {
		t.Skip("no warpgroup-MMA step on this device")
	}
	c, err := loadCheckpoint(ck)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.dropMask) == 0 || !slices.ContainsFunc(c.dropMask, func(b byte) bool { return b != 0 }) {
		t.Fatalf("the checkpoint's dropout mask: %d bytes, none set", len(c.dropMask))
	}
	trainerFails(t, "resume with -gemm wgmma", "-epochs", "2", "-resume", ck, "-gemm", "bf16")
}
