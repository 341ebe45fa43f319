package sluice

import (
	"bytes"
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// The RNG through the binding, mirroring tests/rng_ops.rs: cuRAND's recorded
// draws, save/run/restore/run, checkpoints through bytes and across
// processes, corruption, bad arguments, and draws inside a captured graph.

// cuRAND's draws for seed 0x243F6A8885A308D3, 8 states, 9 draws (a copy of
// tests/data/curand_philox_8x9.bin, embedded so that the test binary built by
// test.sh --build-gpu needs no source tree; TestRNGReferenceCopy checks it).
//
//go:embed testdata/curand_philox_8x9.bin
var curandPhilox8x9 []byte

var rngDists = []RNGDistribution{RNGU32, RNGUniform, RNGNormal}

// rngReference is the reference file: count raw, uniform and normal draws of n
// states (sample-major, each block drawn after the one before), then the
// final states.
type rngReference struct {
	seed     uint64
	n, count int
	draws    [3][]uint32
	states   [][]byte
}

func parseRNGReference(t *testing.T, b []byte, seed uint64, n, count int) rngReference {
	t.Helper()
	m := n * count
	if len(b) != 3*m*4+n*RNGStateBytes {
		t.Fatalf("reference file: %d bytes, want %d", len(b), 3*m*4+n*RNGStateBytes)
	}
	r := rngReference{seed: seed, n: n, count: count}
	for k := range r.draws {
		r.draws[k] = SliceOf[uint32](b[k*m*4 : (k+1)*m*4])
	}
	for i := 0; i < n; i++ {
		off := 3*m*4 + i*RNGStateBytes
		r.states = append(r.states, b[off:off+RNGStateBytes])
	}
	return r
}

func isCuda(t testing.TB, d *Device) bool { return backendOf(t, d) == BackendCUDA }

func newRNG(t testing.TB, s *Stream, seed uint64, n int) *RNG {
	t.Helper()
	r, err := NewRNG(s, seed, n)
	return closeAtEnd(t, r, err)
}

func newCkpt(t testing.TB, s *Stream, r *RNG) *RNGCheckpoint {
	t.Helper()
	c, err := NewRNGCheckpoint(s, r)
	return closeAtEnd(t, c, err)
}

func readWords(t testing.TB, s *Stream, b Memory) []uint32 {
	t.Helper()
	out := make([]uint32, b.mem().Size()/4)
	must(t, CopyToHostSlice(s, out, b, 0))
	return out
}

func readStates(t testing.TB, s *Stream, r *RNG) []byte {
	t.Helper()
	st, err := r.States()
	must(t, err)
	defer st.Close()
	if st.Size() != r.NStates()*RNGStateBytes {
		t.Fatalf("states buffer: %d bytes, want %d", st.Size(), r.NStates()*RNGStateBytes)
	}
	return readBack(t, s, st, st.Size())
}

func serialize(t testing.TB, c *RNGCheckpoint) []byte {
	t.Helper()
	b, err := c.Serialize()
	must(t, err)
	return b
}

// checkDraws compares draws with cuRAND's: bit for bit, except normals on the
// host backend, which are within 1e-5 (the host's Box-Muller uses libm).
func checkDraws(t *testing.T, what string, cuda bool, got, want []uint32, dist RNGDistribution) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d draws, want %d", what, len(got), len(want))
	}
	for i := range got {
		if dist == RNGNormal && !cuda {
			g, w := math.Float32frombits(got[i]), math.Float32frombits(want[i])
			if math.Abs(float64(g-w)) > 1e-5 {
				t.Fatalf("%s normal %d: %v vs cuRAND %v", what, i, g, w)
			}
		} else if got[i] != want[i] {
			t.Fatalf("%s %v draw %d: %08x vs cuRAND %08x", what, dist, i, got[i], want[i])
		}
	}
}

// checkState compares a 64-byte state with cuRAND's: exactly on cuda; on
// host, boxmuller_extra (word 13) within 1e-5 and the rest exactly.
func checkState(t *testing.T, i int, cuda bool, got, want []byte) {
	t.Helper()
	if cuda {
		wantBytes(t, fmt.Sprintf("final state %d", i), got, want)
		return
	}
	g := math.Float32frombits(binary.LittleEndian.Uint32(got[52:]))
	w := math.Float32frombits(binary.LittleEndian.Uint32(want[52:]))
	if math.Abs(float64(g-w)) > 1e-5 {
		t.Fatalf("final state %d: boxmuller_extra %v vs cuRAND %v", i, g, w)
	}
	wantBytes(t, fmt.Sprintf("final state %d (host) before boxmuller_extra", i), got[:52], want[:52])
	wantBytes(t, fmt.Sprintf("final state %d (host) after boxmuller_extra", i), got[56:], want[56:])
}

func checkAgainst(t *testing.T, r rngReference, layout RNGLayout) {
	d := openDev(t)
	cuda := isCuda(t, d)
	s := testStream(t, d)
	rng := newRNG(t, s, r.seed, r.n)
	if info, err := rng.Info(); err != nil || info != (RNGInfo{NStates: r.n, Seed: r.seed}) {
		t.Fatalf("Info: %+v, %v", info, err)
	}
	out := alloc(t, s, r.n*r.count*4)
	for k, dist := range rngDists {
		must(t, rng.Generate(s, dist, layout, out, 0, r.count))
		got := readWords(t, s, out)
		if layout == RNGStateMajor {
			sm := make([]uint32, len(got))
			for i := 0; i < r.n; i++ {
				for j := 0; j < r.count; j++ {
					sm[j*r.n+i] = got[i*r.count+j]
				}
			}
			got = sm
		}
		checkDraws(t, layout.String(), cuda, got, r.draws[k], dist)
	}
	states := readStates(t, s, rng)
	for i := 0; i < r.n; i++ {
		checkState(t, i, cuda, states[i*RNGStateBytes:(i+1)*RNGStateBytes], r.states[i])
	}
}

func TestRNGDrawsEqualCurandsRecordedDraws(t *testing.T) {
	r := parseRNGReference(t, curandPhilox8x9, 0x243F6A8885A308D3, 8, 9)
	for _, layout := range []RNGLayout{RNGSampleMajor, RNGStateMajor} {
		t.Run(layout.String(), func(t *testing.T) { checkAgainst(t, r, layout) })
	}
}

// The embedded reference is the repository's (when the test runs in it).
func TestRNGReferenceCopy(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "tests", "data", "curand_philox_8x9.bin"))
	if err != nil {
		t.Skipf("no source tree here: %v", err)
	}
	wantBytes(t, "testdata/curand_philox_8x9.bin vs tests/data", curandPhilox8x9, b)
}

// drawSteps mirrors draw() of tests/rng_ops.rs: per step, three blocks of
// count draws (the step's distribution, then raw, then normal) into out, read
// back after each step.
func drawSteps(t testing.TB, s *Stream, r *RNG, out *Buffer, steps int) []uint32 {
	t.Helper()
	n := r.NStates()
	count := out.Size() / 4 / n / 3
	var all []uint32
	for step := 0; step < steps; step++ {
		for part, d := range []RNGDistribution{rngDists[step%3], RNGU32, RNGNormal} {
			must(t, r.Generate(s, d, RNGSampleMajor, out, part*n*count*4, count))
		}
		all = append(all, readWords(t, s, out)...)
	}
	return all
}

func wantWords(t testing.TB, what string, got, want []uint32) {
	t.Helper()
	wantBytes(t, what, AsBytes(got), AsBytes(want))
}

func TestRNGSaveRunRestoreRun(t *testing.T) {
	d := openDev(t)
	s := testStream(t, d)
	rng := newRNG(t, s, 7, 257)
	out := alloc(t, s, 257*5*3*4)
	drawSteps(t, s, rng, out, 4)
	ckpt := newCkpt(t, s, rng)
	if ckpt.NStates() != 257 {
		t.Fatalf("checkpoint NStates %d", ckpt.NStates())
	}
	must(t, rng.Save(s, ckpt))
	first := drawSteps(t, s, rng, out, 6)
	must(t, rng.Restore(s, ckpt))
	again := drawSteps(t, s, rng, out, 6)
	wantWords(t, "after restore", again, first)
	// Restoring on another stream is ordered after the draws on the first.
	other := testStream(t, d)
	must(t, rng.Restore(other, ckpt))
	third := drawSteps(t, other, rng, out, 6)
	wantWords(t, "after restore on another stream", third, first)
}

func TestRNGCheckpointSerializeDeserialize(t *testing.T) {
	d := openDev(t)
	s := testStream(t, d)
	rng := newRNG(t, s, 0xfeed, 33)
	out := alloc(t, s, 33*7*3*4)
	drawSteps(t, s, rng, out, 2)
	ckpt := newCkpt(t, s, rng)
	must(t, rng.Save(s, ckpt))
	b := serialize(t, ckpt)
	if n, err := ckpt.SerializedLen(); err != nil || n != len(b) {
		t.Fatalf("SerializedLen %d, %v; Serialize gave %d bytes", n, err, len(b))
	}
	if !bytes.HasPrefix(b, []byte("SLRNGCK\x00")) {
		t.Fatalf("no magic: % x", b[:8])
	}
	want := drawSteps(t, s, rng, out, 3)

	back, err := DeserializeRNGCheckpoint(d, b)
	back = closeAtEnd(t, back, err)
	if info, err := back.Info(); err != nil || info != (RNGInfo{NStates: 33, Seed: 0xfeed}) {
		t.Fatalf("deserialized Info: %+v, %v", info, err)
	}
	fresh := newRNG(t, s, 1, 33)
	must(t, fresh.Restore(s, back))
	if info, err := fresh.Info(); err != nil || info.Seed != 0xfeed {
		t.Fatalf("Info after restore: %+v, %v", info, err)
	}
	wantWords(t, "draws of a new RNG restored from the bytes", drawSteps(t, s, fresh, out, 3), want)
	// The same bytes a second time; SerializeInto a larger buffer.
	wantBytes(t, "serialized again", serialize(t, back), b)
	big := make([]byte, len(b)+10)
	must(t, back.SerializeInto(big))
	wantBytes(t, "SerializeInto", big[:len(b)], b)
}

// The child half of TestRNGCheckpointResumesInAnotherProcess.
func TestRNGChildResumeFromFile(t *testing.T) {
	path := os.Getenv("SLUICE_RNG_CHILD")
	if path == "" {
		t.Skip("the child of TestRNGCheckpointResumesInAnotherProcess")
	}
	d := openDev(t)
	s := testStream(t, d)
	b, err := os.ReadFile(path)
	must(t, err)
	ckpt, err := DeserializeRNGCheckpoint(d, b)
	ckpt = closeAtEnd(t, ckpt, err)
	rng := newRNG(t, s, 12345, ckpt.NStates())
	must(t, rng.Restore(s, ckpt))
	out := alloc(t, s, ckpt.NStates()*4*3*4)
	must(t, os.WriteFile(path+".draws", AsBytes(drawSteps(t, s, rng, out, 5)), 0o644))
}

func TestRNGCheckpointResumesInAnotherProcess(t *testing.T) {
	d := openDev(t)
	s := testStream(t, d)
	rng := newRNG(t, s, 31337, 64)
	out := alloc(t, s, 64*4*3*4)
	drawSteps(t, s, rng, out, 3)
	ckpt := newCkpt(t, s, rng)
	must(t, rng.Save(s, ckpt))
	b := serialize(t, ckpt)
	want := drawSteps(t, s, rng, out, 5)
	path := filepath.Join(t.TempDir(), "ckpt.bin")
	must(t, os.WriteFile(path, b, 0o644))
	cmd := exec.Command(os.Args[0], "-test.run=^TestRNGChildResumeFromFile$", "-test.count=1")
	cmd.Env = append(os.Environ(), "SLUICE_RNG_CHILD="+path)
	if outp, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child process: %v\n%s", err, outp)
	}
	raw, err := os.ReadFile(path + ".draws")
	must(t, err)
	wantWords(t, "the other process's draws", SliceOf[uint32](raw), want)
}

// Serialize waits for the save, not for later work on its stream: the bytes
// hold the save point while a long host callback and further draws follow it.
func TestRNGSerializeHoldsTheSavePoint(t *testing.T) {
	d := openDev(t)
	s := testStream(t, d)
	const n = 1024
	rng := newRNG(t, s, 5, n)
	out := alloc(t, s, n*8*4)
	must(t, rng.Generate(s, RNGUniform, RNGSampleMajor, out, 0, 8))
	ckpt := newCkpt(t, s, rng)
	must(t, rng.Save(s, ckpt))
	saved := readStates(t, s, rng)
	spin := 400 * time.Millisecond
	must(t, s.HostCallback(func() error { time.Sleep(spin); return nil }, nil, nil))
	must(t, rng.Generate(s, RNGNormal, RNGSampleMajor, out, 0, 8))
	t0 := time.Now()
	b := serialize(t, ckpt)
	if took := time.Since(t0); took >= spin/2 {
		t.Fatalf("Serialize waited for later work on the stream (%v)", took)
	}
	if !bytes.Contains(b, saved) {
		t.Fatal("the bytes do not hold the states of the save point")
	}
	// The same through the API: a new RNG restored from the bytes.
	back, err := DeserializeRNGCheckpoint(d, b)
	back = closeAtEnd(t, back, err)
	fresh := newRNG(t, s, 1, n)
	must(t, fresh.Restore(s, back))
	wantBytes(t, "states restored from the bytes", readStates(t, s, fresh), saved)
	if bytes.Equal(readStates(t, s, rng), saved) {
		t.Fatal("the draws after the save changed nothing")
	}
}

func TestRNGEveryBitFlipAndTruncationIsRefused(t *testing.T) {
	d := openDev(t)
	s := testStream(t, d)
	rng := newRNG(t, s, 11, 2)
	ckpt := newCkpt(t, s, rng)
	must(t, rng.Save(s, ckpt))
	b := serialize(t, ckpt)
	base := LiveHandles()
	for i := range b {
		for bit := 0; bit < 8; bit++ {
			c := bytes.Clone(b)
			c[i] ^= 1 << bit
			got, err := DeserializeRNGCheckpoint(d, c)
			if err == nil {
				got.Close()
				t.Fatalf("byte %d bit %d: a flipped bit was accepted", i, bit)
			}
			wantCode(t, err, ErrCorruptData)
			if err.(*Error).Message == "" {
				t.Fatalf("byte %d bit %d: no message", i, bit)
			}
		}
	}
	for n := 0; n < len(b); n++ {
		got, err := DeserializeRNGCheckpoint(d, b[:n])
		if err == nil {
			got.Close()
			t.Fatalf("truncated to %d: accepted", n)
		}
		wantCode(t, err, ErrCorruptData)
	}
	if LiveHandles() != base {
		t.Fatalf("refused deserializations left handles: %d, base %d", LiveHandles(), base)
	}
	// The intact bytes still read.
	ok, err := DeserializeRNGCheckpoint(d, b)
	closeAtEnd(t, ok, err)
}

// A graph that draws (and saves), replayed 3 times, gives 3 different draws
// equal to 3 eager draws, and each replay refreshes the checkpoint.
func TestRNGReplayedGraphDrawsLikeEagerDraws(t *testing.T) {
	d := openDev(t)
	s := testStream(t, d)
	const n, count = 300, 6
	eager := newRNG(t, s, 2024, n)
	graphed := newRNG(t, s, 2024, n)
	out := alloc(t, s, n*count*4)
	ckpt := newCkpt(t, s, graphed)
	var want [][]uint32
	for i := 0; i < 3; i++ {
		for _, dist := range rngDists {
			must(t, eager.Generate(s, dist, RNGSampleMajor, out, 0, count))
			want = append(want, readWords(t, s, out))
		}
	}
	gOut := alloc(t, s, n*count*3*4)
	g := captureGraph(t, s, func() {
		for p, dist := range rngDists {
			must(t, graphed.Generate(s, dist, RNGSampleMajor, gOut, p*n*count*4, count))
		}
		must(t, graphed.Save(s, ckpt))
	})
	x := instantiate(t, g)
	var got [][]uint32
	var saves [][]byte
	for i := 0; i < 3; i++ {
		must(t, x.Launch(s))
		all := readWords(t, s, gOut)
		for p := 0; p < 3; p++ {
			got = append(got, all[p*n*count:(p+1)*n*count])
		}
		saves = append(saves, serialize(t, ckpt))
	}
	for i := range want {
		wantWords(t, fmt.Sprintf("replay %d, %v", i/3, rngDists[i%3]), got[i], want[i])
	}
	if bytes.Equal(AsBytes(got[0]), AsBytes(got[3])) {
		t.Fatal("a replay repeated the previous draw")
	}
	if bytes.Equal(saves[0], saves[1]) {
		t.Fatal("the captured save did not refresh the checkpoint")
	}
	eagerCkpt := newCkpt(t, s, eager)
	must(t, eager.Save(s, eagerCkpt))
	wantBytes(t, "the last replay's save vs the eager states", saves[2], serialize(t, eagerCkpt))
}

// A graph goes on drawing and saving after the wrappers of its RNG and
// checkpoint were dropped and collected (the graph keeps them reachable, and
// the library keeps the memory for the graph).
func TestRNGGraphKeepsItsObjects(t *testing.T) {
	d := openDev(t)
	s := testStream(t, d)
	const n, count = 16, 4
	eager := newRNG(t, s, 9, n)
	gOut := alloc(t, s, n*count*4)
	x := func() *GraphExec {
		rng, err := NewRNG(s, 9, n)
		must(t, err)
		ck, err := NewRNGCheckpoint(s, rng)
		must(t, err)
		g := captureGraph(t, s, func() {
			must(t, rng.Generate(s, RNGU32, RNGStateMajor, gOut, 0, count))
			must(t, rng.Save(s, ck))
		})
		x := instantiate(t, g)
		must(t, g.Close())
		return x
	}()
	out := alloc(t, s, n*count*4)
	for i := 0; i < 3; i++ {
		runtime.GC()
		runtime.GC()
		must(t, x.Launch(s))
		must(t, eager.Generate(s, RNGU32, RNGStateMajor, out, 0, count))
		wantWords(t, fmt.Sprintf("launch %d", i), readWords(t, s, gOut), readWords(t, s, out))
	}
}

func TestRNGBadArguments(t *testing.T) {
	d := openDev(t)
	s := testStream(t, d)
	_, err := NewRNG(s, 1, 0)
	wantCode(t, err, ErrInvalidArgument)
	if !strings.Contains(err.Error(), "at least one state") {
		t.Fatalf("0 states: %v", err)
	}
	_, err = NewRNG(s, 1, -1)
	wantCode(t, err, ErrInvalidArgument)
	_, err = NewRNG(nil, 1, 1)
	wantCode(t, err, ErrNullArgument)

	rng := newRNG(t, s, 1, 10)
	small := alloc(t, s, 10*3*4)
	err = rng.Generate(s, RNGU32, RNGSampleMajor, small, 0, 4)
	wantCode(t, err, ErrOutOfRange)
	err = rng.Generate(s, RNGU32, RNGSampleMajor, small, 2, 1)
	wantCode(t, err, ErrInvalidArgument)
	if !strings.Contains(err.Error(), "multiple of 4") {
		t.Fatalf("misaligned offset: %v", err)
	}
	wantCode(t, rng.Generate(s, RNGDistribution(9), RNGSampleMajor, small, 0, 1), ErrInvalidArgument)
	wantCode(t, rng.Generate(s, RNGU32, RNGLayout(0), small, 0, 1), ErrInvalidArgument)
	wantCode(t, rng.Generate(s, RNGU32, RNGSampleMajor, small, -4, 1), ErrOutOfRange)
	wantCode(t, rng.Generate(s, RNGU32, RNGSampleMajor, small, 0, -1), ErrOutOfRange)
	wantCode(t, rng.Generate(s, RNGU32, RNGSampleMajor, nil, 0, 1), ErrNullArgument)
	pinned := allocPinned(t, d, 400)
	err = rng.Generate(s, RNGU32, RNGSampleMajor, pinned, 0, 1)
	wantCode(t, err, ErrInvalidArgument)
	if !strings.Contains(err.Error(), "device buffer") {
		t.Fatalf("pinned output: %v", err)
	}

	other := newRNG(t, s, 1, 11)
	ckpt := newCkpt(t, s, other)
	err = rng.Save(s, ckpt)
	wantCode(t, err, ErrInvalidArgument)
	if !strings.Contains(err.Error(), "11 states") {
		t.Fatalf("save into a checkpoint of 11 states: %v", err)
	}
	wantCode(t, rng.Restore(s, ckpt), ErrInvalidArgument)
	wantCode(t, rng.Save(s, nil), ErrNullArgument)
	wantCode(t, ckpt.SerializeInto(make([]byte, 3)), ErrOutOfRange)
	wantCode(t, ckpt.SerializeInto(nil), ErrOutOfRange)
	_, err = DeserializeRNGCheckpoint(d, nil)
	wantCode(t, err, ErrCorruptData)
	_, err = DeserializeRNGCheckpoint(nil, []byte{1})
	wantCode(t, err, ErrNullArgument)

	// Nothing was drawn by the refused calls: the draws are a fresh RNG's.
	fresh := newRNG(t, s, 1, 10)
	a, b := alloc(t, s, 10*4), alloc(t, s, 10*4)
	must(t, rng.Generate(s, RNGU32, RNGSampleMajor, a, 0, 1))
	must(t, fresh.Generate(s, RNGU32, RNGSampleMajor, b, 0, 1))
	wantWords(t, "draws after refused calls", readWords(t, s, a), readWords(t, s, b))

	// Neither RNGs nor checkpoints can be made during a capture (they
	// allocate), and the capture fails.
	for name, make := range map[string]func() error{
		"NewRNGCheckpoint": func() error { _, err := NewRNGCheckpoint(s, rng); return err },
		"NewRNG":           func() error { _, err := NewRNG(s, 1, 1); return err },
	} {
		must(t, s.BeginCapture(CaptureRelaxed))
		err := make()
		g, endErr := s.EndCapture()
		if endErr == nil {
			g.Close()
		}
		wantCode(t, err, ErrCaptureUnsupported)
		if !errors.Is(endErr, ErrCaptureFailed) {
			t.Fatalf("%s during a capture: EndCapture gave %v", name, endErr)
		}
	}
}

func TestRNGUseAfterClose(t *testing.T) {
	d := openDev(t)
	s := testStream(t, d)
	rng, err := NewRNG(s, 3, 4)
	must(t, err)
	ckpt, err := NewRNGCheckpoint(s, rng)
	must(t, err)
	live := newRNG(t, s, 3, 4)
	liveCkpt := newCkpt(t, s, live)
	out := alloc(t, s, 64)
	must(t, rng.Close())
	must(t, rng.Close())
	must(t, ckpt.Close())
	must(t, ckpt.Close())
	for name, call := range map[string]func() error{
		"RNG.Info":          func() error { _, err := rng.Info(); return err },
		"RNG.Generate":      func() error { return rng.Generate(s, RNGU32, RNGSampleMajor, out, 0, 1) },
		"RNG.States":        func() error { _, err := rng.States(); return err },
		"RNG.Save":          func() error { return rng.Save(s, liveCkpt) },
		"RNG.Restore":       func() error { return rng.Restore(s, liveCkpt) },
		"NewRNGCheckpoint":  func() error { _, err := NewRNGCheckpoint(s, rng); return err },
		"Checkpoint.Info":   func() error { _, err := ckpt.Info(); return err },
		"Checkpoint.Len":    func() error { _, err := ckpt.SerializedLen(); return err },
		"Checkpoint.Bytes":  func() error { _, err := ckpt.Serialize(); return err },
		"Checkpoint.Into":   func() error { return ckpt.SerializeInto(make([]byte, 4096)) },
		"Save(closed ckpt)": func() error { return live.Save(s, ckpt) },
		"Restore(closed)":   func() error { return live.Restore(s, ckpt) },
	} {
		t.Run(name, func(t *testing.T) { wantClosed(t, call()) })
	}
}

// The states buffer is the RNG's: closing it leaves the RNG drawing, and it
// outlives the RNG's Close (the library keeps the memory for it).
func TestRNGStatesBuffer(t *testing.T) {
	d := openDev(t)
	s := testStream(t, d)
	rng := newRNG(t, s, 77, 5)
	st, err := rng.States()
	st = closeAtEnd(t, st, err)
	info, err := st.Info()
	must(t, err)
	if info.Kind != BufferDevice || info.Size != 5*RNGStateBytes || st.Stream() != s {
		t.Fatalf("states buffer: %+v", info)
	}
	before := readBack(t, s, st, st.Size())
	// Key words 8..9 of every state are the seed.
	for i := 0; i < 5; i++ {
		key := binary.LittleEndian.Uint64(before[i*RNGStateBytes+32:])
		if key != 77 {
			t.Fatalf("state %d key %#x", i, key)
		}
	}
	out := alloc(t, s, 5*4)
	must(t, rng.Generate(s, RNGU32, RNGSampleMajor, out, 0, 1))
	after := readBack(t, s, st, st.Size())
	if bytes.Equal(before, after) {
		t.Fatal("a draw did not change the states seen through States()")
	}
	must(t, rng.Close())
	wantBytes(t, "states after the RNG's Close", readBack(t, s, st, st.Size()), after)
}

// Wrappers dropped without Close are released by their cleanups.
func TestRNGCleanups(t *testing.T) {
	d := openDev(t)
	s := testStream(t, d)
	must(t, s.Synchronize())
	base := LiveHandles()
	func() {
		for i := 0; i < 20; i++ {
			r, err := NewRNG(s, uint64(i), 3)
			must(t, err)
			_, err = NewRNGCheckpoint(s, r)
			must(t, err)
		}
	}()
	waitFor(t, "RNG cleanups", func() bool { runtime.GC(); return LiveHandles() <= base })
}
