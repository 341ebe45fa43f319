package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
)

// The checkpoint file (-save, -resume), little-endian:
//
//	header      ckptHeader (magic "SLTRAIN\x00", version, the run's shape and
//	            hyperparameters, where the data stands, the seeds)
//	params      nParams float32: W1, b1, W2, b2
//	momentum    nParams float32, same layout
//	rng         uint64 length, then RNGCheckpoint.Serialize's bytes (they
//	            carry their own CRC32C, checked by DeserializeRNGCheckpoint)
//	mask        uint64 length, then the next step's dropout mask where it was
//	            drawn a step ahead (cuda, the warpgroup-MMA step: model.preDraw,
//	            whose RNG states are past it), or nothing
//	crc         uint32 CRC32C (Castagnoli) of every byte before it
//
// Two runs that reach the same state write the same bytes (no time stamps),
// so comparing files compares weights, momentum and RNG states bit for bit.

const (
	ckptMagic   = "SLTRAIN\x00"
	ckptVersion = 3 // 3: Train counts every example loaded, not whole batches
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

type ckptHeader struct {
	Magic   [8]byte
	Version uint32
	Hidden  uint32
	Batch   uint32
	Train   uint32 // training examples loaded (-limit): the shuffle permutes them all
	// Epochs completed; the next batch is NextBatch (global, counted from the
	// first epoch: Epochs * Train / Batch at an epoch boundary).
	Epochs      uint32
	NextBatch   uint64
	ShuffleSeed uint64
	RNGSeed     uint64
	Dropout     float32
	LR          float32
	Momentum    float32
	WeightDecay float32
	NParams     uint64
}

type checkpoint struct {
	hdr      ckptHeader
	params   []float32
	momentum []float32
	rng      []byte
	dropMask []byte
}

func (c *checkpoint) marshal() []byte {
	var b bytes.Buffer
	c.hdr.Magic = [8]byte([]byte(ckptMagic))
	c.hdr.Version = ckptVersion
	c.hdr.NParams = uint64(len(c.params))
	// Writes to a bytes.Buffer cannot fail.
	_ = binary.Write(&b, binary.LittleEndian, &c.hdr)
	_ = binary.Write(&b, binary.LittleEndian, c.params)
	_ = binary.Write(&b, binary.LittleEndian, c.momentum)
	_ = binary.Write(&b, binary.LittleEndian, uint64(len(c.rng)))
	b.Write(c.rng)
	_ = binary.Write(&b, binary.LittleEndian, uint64(len(c.dropMask)))
	b.Write(c.dropMask)
	_ = binary.Write(&b, binary.LittleEndian, crc32.Checksum(b.Bytes(), castagnoli))
	return b.Bytes()
}

func (c *checkpoint) save(path string) (crc uint32, err error) {
	data := c.marshal()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(data[len(data)-4:]), os.Rename(tmp, path)
}

func loadCheckpoint(path string) (*checkpoint, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("checkpoint %s: %s", path, fmt.Sprintf(format, args...))
	}
	hsize := binary.Size(ckptHeader{})
	if len(data) < hsize+4 {
		return nil, bad("truncated (%d bytes)", len(data))
	}
	body, sum := data[:len(data)-4], binary.LittleEndian.Uint32(data[len(data)-4:])
	if got := crc32.Checksum(body, castagnoli); got != sum {
		return nil, bad("CRC32C %08x, stored %08x: corrupt or truncated", got, sum)
	}
	c := &checkpoint{}
	r := bytes.NewReader(body)
	if err := binary.Read(r, binary.LittleEndian, &c.hdr); err != nil {
		return nil, bad("header: %v", err)
	}
	if string(c.hdr.Magic[:]) != ckptMagic {
		return nil, bad("not a trainer checkpoint")
	}
	if c.hdr.Version != ckptVersion {
		return nil, bad("format version %d, want %d", c.hdr.Version, ckptVersion)
	}
	n := c.hdr.NParams
	if n == 0 || n > uint64(len(body))/8 {
		return nil, bad("%d parameters do not fit in %d bytes", n, len(body))
	}
	c.params, c.momentum = make([]float32, n), make([]float32, n)
	for _, v := range []any{c.params, c.momentum} {
		if err := binary.Read(r, binary.LittleEndian, v); err != nil {
			return nil, bad("%v", err)
		}
	}
	if c.rng, err = readSection(r, "RNG checkpoint"); err != nil {
		return nil, bad("%v", err)
	}
	if c.dropMask, err = readSection(r, "dropout mask"); err != nil {
		return nil, bad("%v", err)
	}
	if r.Len() != 0 {
		return nil, bad("%d bytes after the dropout mask", r.Len())
	}
	return c, nil
}

// readSection reads a uint64 length, then that many bytes.
func readSection(r *bytes.Reader, name string) ([]byte, error) {
	var n uint64
	if err := binary.Read(r, binary.LittleEndian, &n); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if n > uint64(r.Len()) {
		return nil, fmt.Errorf("%s of %d bytes, %d left", name, n, r.Len())
	}
	b := make([]byte, n)
	_, err := io.ReadFull(r, b)
	return b, err
}

// compatible checks that a checkpoint was made by a run of the same shape and
// hyperparameters, which a bit-identical continuation needs.
func (c *checkpoint) compatible(want ckptHeader) error {
	h := c.hdr
	var errs []error
	check := func(name string, got, want any) {
		if got != want {
			errs = append(errs, fmt.Errorf("%s is %v in the checkpoint, %v here", name, got, want))
		}
	}
	check("-hidden", h.Hidden, want.Hidden)
	check("-batch", h.Batch, want.Batch)
	check("training examples (-limit)", h.Train, want.Train)
	check("-seed (shuffle)", h.ShuffleSeed, want.ShuffleSeed)
	check("-seed (RNG)", h.RNGSeed, want.RNGSeed)
	check("-dropout", h.Dropout, want.Dropout)
	check("-lr", h.LR, want.LR)
	check("-momentum", h.Momentum, want.Momentum)
	check("-wd", h.WeightDecay, want.WeightDecay)
	if h.Batch == 0 || h.NextBatch != uint64(h.Epochs)*uint64(h.Train/h.Batch) {
		errs = append(errs, fmt.Errorf("data position %d is not the start of epoch %d", h.NextBatch, h.Epochs+1))
	}
	return errors.Join(errs...)
}
