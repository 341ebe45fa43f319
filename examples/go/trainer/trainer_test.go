package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The tests run the trainer as separate processes: the test binary itself,
// re-executed with TRAINER_TEST_MAIN=1, is the trainer (so a resumed run is
// a fresh process, as it must be). On the host backend by default.

func TestMain(m *testing.M) {
	if os.Getenv("TRAINER_TEST_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	if os.Getenv("SLUICE_BACKEND") == "" {
		os.Setenv("SLUICE_BACKEND", "host")
	}
	os.Exit(m.Run())
}

// small is a CI-sized run: 4096 images (16 batches), 64 hidden units, and
// two prefetcher slots, so that the graphs keyed by a slot (-input-in-graph)
// replay within an epoch.
var small = []string{"-limit", "4096", "-hidden", "64", "-test-limit", "2000", "-batch", "256", "-depth", "2"}

func trainer(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], append(append([]string{}, small...), args...)...)
	cmd.Env = append(os.Environ(), "TRAINER_TEST_MAIN=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("trainer %q: %v\n%s", args, err, out)
	}
	t.Logf("trainer %q:\n%s", args, out)
	return string(out)
}

// trainerFails runs the trainer with args and wants it to fail with an error
// that names want; it returns the output.
func trainerFails(t *testing.T, want string, args ...string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], append(append([]string{}, small...), args...)...)
	cmd.Env = append(os.Environ(), "TRAINER_TEST_MAIN=1")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), want) {
		t.Errorf("trainer %q: %v, want a failure naming %q:\n%s", args, err, want, out)
	}
	return string(out)
}

func read(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var accRe = regexp.MustCompile(`RESULT accuracy=([0-9.]+)`)

// TestResumeBitIdentical: 2 epochs in one process against 1 epoch, -save,
// and a fresh process that resumes for the second: the per-step losses and
// the checkpoints after epoch 2 (weights, momentum, RNG states, position)
// are equal byte for byte. The split run uses the other modes (eager step,
// blocking copies) for its first epoch, so they are checked to compute the
// same bits as the graph-replayed, prefetched one; a second resume runs
// eagerly with two batches per lease.
func TestResumeBitIdentical(t *testing.T) {
	dir := t.TempDir()
	p := func(n string) string { return filepath.Join(dir, n) }

	out := trainer(t, "-epochs", "2", "-losses", p("full.losses"), "-save", p("full.ckpt"))
	m := accRe.FindStringSubmatch(out)
	if m == nil {
		t.Fatal("no RESULT accuracy line")
	}
	if acc, _ := strconv.ParseFloat(m[1], 64); acc < 0.5 {
		t.Errorf("test accuracy %.4f after 2 epochs: not learning (chance is 0.1)", acc)
	}

	trainer(t, "-epochs", "1", "-eager", "-blocking", "-losses", p("a.losses"), "-save", p("a.ckpt"))
	trainer(t, "-epochs", "2", "-resume", p("a.ckpt"), "-losses", p("b.losses"), "-save", p("b.ckpt"))

	split := append(read(t, p("a.losses")), read(t, p("b.losses"))...)
	full := read(t, p("full.losses"))
	if len(full) == 0 || !bytes.Equal(split, full) {
		t.Errorf("per-step losses differ:\nuninterrupted:\n%s\nsaved and resumed:\n%s", full, split)
	}
	if !bytes.Equal(read(t, p("full.ckpt")), read(t, p("b.ckpt"))) {
		t.Error("the checkpoints after epoch 2 differ (weights, momentum or RNG states)")
	}
	// Resumed eagerly, two batches per lease (the eager default): the same bits.
	trainer(t, "-epochs", "2", "-resume", p("a.ckpt"), "-eager", "-losses", p("c.losses"), "-save", p("c.ckpt"))
	if !bytes.Equal(read(t, p("b.losses")), read(t, p("c.losses"))) || !bytes.Equal(read(t, p("b.ckpt")), read(t, p("c.ckpt"))) {
		t.Error("resumed eagerly, the losses or the checkpoint differ from the replayed resume")
	}
}

// TestCorruptCheckpoint: a flipped byte is refused (CRC32C), as is a
// checkpoint of another shape.
func TestCorruptCheckpoint(t *testing.T) {
	dir := t.TempDir()
	ck := filepath.Join(dir, "a.ckpt")
	trainer(t, "-epochs", "1", "-save", ck)
	b := read(t, ck)
	b[len(b)/2] ^= 1
	bad := filepath.Join(dir, "bad.ckpt")
	if err := os.WriteFile(bad, b, 0o644); err != nil {
		t.Fatal(err)
	}
	trainerFails(t, "CRC32C", "-epochs", "2", "-resume", bad)
	trainerFails(t, "-lr", "-epochs", "2", "-resume", ck, "-lr", "0.01")
	// As many whole batches (16 of 256), but another shuffle: the count of
	// examples loaded is the checkpoint's, not that of whole batches.
	trainerFails(t, "-limit", "-epochs", "2", "-resume", ck, "-limit", "4100")
}

// TestLossesWriteErrorFailsTheRun: the losses are what a resumed run is
// checked against; a write that fails (no space left) fails the run.
func TestLossesWriteErrorFailsTheRun(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full")
	}
	trainerFails(t, "no space", "-epochs", "1", "-losses", "/dev/full")
}

// TestInputRoutingAndBenchModes: copying batches on the training stream into
// one input set computes the same losses, bit for bit, as two steps per
// graph (four sets, each graph ending with the next pair's input stage: a
// graph per slot), and so do the input stage on a stream of its own
// (-input-in-graph=false: two graphs), one and four steps per graph (and
// eagerly four batches per lease), and storing the loss with a kernel of its
// own instead of gemm_tn_sgd's (replayed and eagerly); -bench-steps and
// -bench-input report a rate.
func TestInputRoutingAndBenchModes(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.losses"), filepath.Join(dir, "b.losses")
	out := trainer(t, "-epochs", "1", "-losses", a, "-bench-steps", "20", "-graph-steps", "2")
	trainer(t, "-epochs", "1", "-losses", b, "-overlap-input=false")
	if la, lb := read(t, a), read(t, b); len(la) == 0 || !bytes.Equal(la, lb) {
		t.Fatalf("losses differ between the input routings:\n%s\n%s", la, lb)
	}
	// A step per graph: the same losses from twice the graph runs.
	single := trainer(t, "-epochs", "1", "-losses", b, "-graph-steps", "1")
	if la, lb := read(t, a), read(t, b); !bytes.Equal(la, lb) {
		t.Fatalf("losses differ between two steps and one step per graph:\n%s\n%s", la, lb)
	}
	if p, s := graphRuns(t, out), graphRuns(t, single); p == 0 || 2*p != s {
		t.Fatalf("graph runs: %d with two steps per graph, %d with one (want half)", p, s)
	}
	if c, r := graphCounts(t, out); c != 2 || r == 0 {
		t.Fatalf("the default captured %d graphs (want 2: two slots, each with its pair of sets) and replayed %d", c, r)
	}
	// The loss stored by a kernel of its own (loss_store) instead of gemm_tn_sgd's
	// last block, replayed and eagerly; and eagerly with a batch per lease.
	leased := map[string]int{}
	for _, args := range [][]string{{"-loss-in-sgd=false"}, {"-loss-in-sgd=false", "-eager"}, {"-eager", "-graph-steps", "2"},
		{"-eager", "-eager-pairs=false"}, {"-input-in-graph=false", "-graph-steps", "2"}, {"-input-in-graph=false", "-eager"},
		{"-graph-steps", "4"}, {"-graph-steps", "4", "-eager"}} {
		out := trainer(t, append([]string{"-epochs", "1", "-losses", b}, args...)...)
		if la, lb := read(t, a), read(t, b); !bytes.Equal(la, lb) {
			t.Fatalf("losses differ with %q:\n%s\n%s", args, la, lb)
		}
		leased[strings.Join(args, " ")] = slotsLeased(t, out)
		if strings.Join(args, " ") == "-input-in-graph=false -graph-steps 2" {
			if n, _ := graphCounts(t, out); n != 2 {
				t.Fatalf("-input-in-graph=false captured %d graphs, want 2 (one per pair of sets)", n)
			}
		}
	}
	one := leased["-eager -eager-pairs=false"]
	if p := leased["-eager -graph-steps 2"]; p == 0 || p != ceilDiv(one, 2) {
		t.Fatalf("slots leased eagerly: %d with two batches per lease, %d with one (want half)", p, one)
	}
	if q := leased["-graph-steps 4 -eager"]; q != ceilDiv(one, 4) {
		t.Fatalf("slots leased eagerly: %d with four batches per lease, %d with one (want a quarter)", q, one)
	}
	for _, c := range []struct {
		out string
		re  *regexp.Regexp
	}{
		{out, regexp.MustCompile(`RESULT step_only_steps_per_s=([0-9.]+)`)},
		{trainer(t, "-bench-input", "40"), regexp.MustCompile(`RESULT input_batches_per_s=([0-9.]+)`)},
	} {
		m := c.re.FindStringSubmatch(c.out)
		if m == nil {
			t.Fatalf("no %v in:\n%s", c.re, c.out)
		}
		if v, _ := strconv.ParseFloat(m[1], 64); v <= 0 {
			t.Fatalf("%s: not a rate", m[0])
		}
	}
}

// slotsLeased is the number of prefetcher slots a trainer's output reports.
func slotsLeased(t *testing.T, out string) int {
	t.Helper()
	m := regexp.MustCompile(`prefetcher: (\d+) slots leased`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no prefetcher line in:\n%s", out)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// graphCounts is the number of graphs a trainer's output reports captured,
// and of graph replays.
func graphCounts(t *testing.T, out string) (captured, replayed int) {
	t.Helper()
	m := regexp.MustCompile(`graph cache: \d+ eager, (\d+) captured, (\d+) replayed`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no graph cache line in:\n%s", out)
	}
	captured, _ = strconv.Atoi(m[1])
	replayed, _ = strconv.Atoi(m[2])
	return captured, replayed
}

// graphRuns is the number of graph cache runs (eager, captured or replayed)
// that a trainer's output reports.
func graphRuns(t *testing.T, out string) int {
	t.Helper()
	m := regexp.MustCompile(`graph cache: (\d+) eager, (\d+) captured, (\d+) replayed`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no graph cache line in:\n%s", out)
	}
	runs := 0
	for _, n := range m[1:] {
		v, _ := strconv.Atoi(n)
		runs += v
	}
	return runs
}
