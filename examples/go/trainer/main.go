// Command trainer is the prefetching input pipeline of a Go trainer (seed
// 001, gotorch's ImageLoader) on sluice: a producer goroutine fills pinned
// batches, the host-to-device copy of batch b+1 runs on a copy stream while
// batch b is computed on a compute stream, and per-buffer sync objects order
// everything across the two streams with no host synchronisation and no
// "current stream". Slots are double-buffered by hand.
//
// On the cuda backend the compute is a PTX kernel (y = a*x + b) loaded with
// Device.LoadModule; on the host backend it is a host callback doing the
// same on the host backend's "device" memory. Results are checked; the
// command exits non-zero on a mismatch.
//
// With -graphs, the compute step of each slot goes through a GraphCache:
// run eagerly for the slot's first batch, captured into a graph for its
// second, and replayed after that (on the host backend the captured host
// callback runs once per replay; on cuda the graph holds the kernel node).
//
//	go run ./trainer                 # SLUICE_BACKEND=auto: cuda if present, else host
//	SLUICE_BACKEND=host go run ./trainer -batches 400 -elems 262144
//	go run ./trainer -graphs         # compute replayed from graphs
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	sluice "github.com/sluice-rt/sluice/bindings/go"
)

const (
	scaleA = float32(2)
	scaleB = float32(0.5)
)

// scalePTX: y[i] = a*x[i] + b for i < n.
const scalePTX = `.version 7.0
.target sm_75
.address_size 64

.visible .entry scale_bias(
	.param .u64 p_y,
	.param .u64 p_x,
	.param .f32 p_a,
	.param .f32 p_b,
	.param .u32 p_n
)
{
	.reg .pred %p<2>;
	.reg .b32 %r<6>;
	.reg .f32 %f<5>;
	.reg .b64 %rd<8>;

	ld.param.u64 %rd1, [p_y];
	ld.param.u64 %rd2, [p_x];
	ld.param.f32 %f1, [p_a];
	ld.param.f32 %f2, [p_b];
	ld.param.u32 %r1, [p_n];
	mov.u32 %r2, %ctaid.x;
	mov.u32 %r3, %ntid.x;
	mov.u32 %r4, %tid.x;
	mad.lo.s32 %r5, %r2, %r3, %r4;
	setp.ge.u32 %p1, %r5, %r1;
	@%p1 bra DONE;
	cvta.to.global.u64 %rd3, %rd2;
	cvta.to.global.u64 %rd4, %rd1;
	mul.wide.u32 %rd5, %r5, 4;
	add.s64 %rd6, %rd3, %rd5;
	ld.global.f32 %f3, [%rd6];
	fma.rn.f32 %f4, %f3, %f1, %f2;
	add.s64 %rd7, %rd4, %rd5;
	st.global.f32 [%rd7], %f4;
DONE:
	ret;
}
`

// input is the value of element i of batch b: small integers, so a*x+b is
// exact in float32 on every backend.
func input(b, i int) float32 { return float32((b*31 + i) % 4096) }

// slot is one of the double buffers: pinned staging, device input, device
// output and a pinned result buffer, plus the batch whose result is pending.
type slot struct {
	pin     *sluice.PinnedBuffer
	in, out *sluice.Buffer
	res     *sluice.PinnedBuffer
	pending int
}

type pipeline struct {
	dev           *sluice.Device
	backend       sluice.Backend
	copyS, compS  *sluice.Stream
	slots         []*slot
	elems, nbytes int
	kernel        *sluice.Function
	// cache, with -graphs: the compute step of slot i is region i.
	cache *sluice.GraphCache
}

func newPipeline(dev *sluice.Device, nslots, elems int, graphs bool) (*pipeline, error) {
	p := &pipeline{dev: dev, elems: elems, nbytes: 4 * elems}
	var err error
	if graphs {
		if p.cache, err = sluice.NewGraphCache(dev); err != nil {
			return nil, err
		}
	}
	if p.backend, err = dev.Backend(); err != nil {
		return nil, err
	}
	_, greatest, err := dev.PriorityRange()
	if err != nil {
		return nil, err
	}
	if p.copyS, err = dev.NewStream(sluice.StreamNonBlocking, 0); err != nil {
		return nil, err
	}
	if p.compS, err = dev.NewStream(sluice.StreamNonBlocking, greatest); err != nil {
		return nil, err
	}
	p.copyS.SetLabel("trainer: H2D copy")
	p.compS.SetLabel("trainer: compute")
	for i := 0; i < nslots; i++ {
		s := &slot{pending: -1}
		if s.pin, err = dev.AllocPinned(p.nbytes); err != nil {
			return nil, err
		}
		if s.in, err = p.copyS.Alloc(p.nbytes); err != nil {
			return nil, err
		}
		if s.out, err = p.compS.Alloc(p.nbytes); err != nil {
			return nil, err
		}
		if s.res, err = dev.AllocPinned(p.nbytes); err != nil {
			return nil, err
		}
		p.slots = append(p.slots, s)
	}
	if p.backend == sluice.BackendCUDA {
		mod, err := dev.LoadModule([]byte(scalePTX))
		if err != nil {
			return nil, err
		}
		if p.kernel, err = mod.Function("scale_bias"); err != nil {
			return nil, err
		}
	}
	return p, nil
}

func (p *pipeline) Close() {
	if p.cache != nil {
		p.cache.Close() // before the buffers its graphs use
	}
	for _, s := range p.slots {
		s.pin.Close()
		s.in.Close()
		s.out.Close()
		s.res.Close()
	}
	if p.kernel != nil {
		p.kernel.Close()
		p.kernel.Module().Close()
	}
	p.copyS.Close()
	p.compS.Close()
}

// computeSlot enqueues the compute of slot i on stream st: directly, or, with
// -graphs, as region i of the graph cache (one tracked op either way).
func (p *pipeline) computeSlot(st *sluice.Stream, i int) error {
	s := p.slots[i]
	if p.cache == nil {
		return p.compute(st, s)
	}
	// The body runs for the slot's first two batches only (eager, then
	// captured); it must issue the same ops every time, which it does: the
	// slot's buffers never change.
	return p.cache.Run(uint64(i), st, func(v *sluice.Stream) error { return p.compute(v, s) })
}

// compute enqueues out = a*in + b on stream st, as one tracked op that reads
// in and writes out.
func (p *pipeline) compute(st *sluice.Stream, s *slot) error {
	reads, writes := []sluice.Syncable{s.in}, []sluice.Syncable{s.out}
	if p.kernel != nil {
		cfg := sluice.LaunchConfig{Grid: sluice.Dim3{X: uint32((p.elems + 255) / 256)}, Block: sluice.Dim3{X: 256}}
		return p.kernel.Launch(st, cfg, reads, writes, s.out, s.in, scaleA, scaleB, uint32(p.elems))
	}
	// Host backend: device memory is host memory; a host callback stands in
	// for the kernel. It touches only memory, never sluice.
	inB, err := s.in.HostBytes()
	if err != nil {
		return err
	}
	outB, err := s.out.HostBytes()
	if err != nil {
		return err
	}
	x, y := sluice.SliceOf[float32](inB), sluice.SliceOf[float32](outB)
	return st.HostCallback(func() error {
		for i := range x {
			y[i] = scaleA*x[i] + scaleB
		}
		return nil
	}, reads, writes)
}

// corruptBatch, when >= 0, makes the producer write one wrong input element
// into that batch (-corrupt-batch), to show that a mismatch is caught.
var corruptBatch = -1

func fill(s *slot, b int) error {
	// The copy that read this staging buffer last time must be done.
	if err := s.pin.WaitWrite(); err != nil {
		return err
	}
	x := sluice.SliceOf[float32](s.pin.Bytes())
	for i := range x {
		x[i] = input(b, i)
	}
	if b == corruptBatch {
		x[len(x)/2]++
	}
	return nil
}

// check waits for the result of the slot's pending batch and verifies it.
func (p *pipeline) check(s *slot) error {
	if s.pending < 0 {
		return nil
	}
	if err := s.res.WaitRead(); err != nil {
		return err
	}
	y := sluice.SliceOf[float32](s.res.Bytes())
	for i := range y {
		if want := scaleA*input(s.pending, i) + scaleB; y[i] != want {
			return fmt.Errorf("batch %d element %d: got %v, want %v", s.pending, i, y[i], want)
		}
	}
	s.pending = -1
	return nil
}

type item struct{ slot, batch int }

// runPrefetch: a producer goroutine fills pinned batches; the main goroutine
// enqueues the copy on the copy stream and the compute on the compute stream.
func (p *pipeline) runPrefetch(batches int) error {
	free := make(chan int, len(p.slots))
	ready := make(chan item, len(p.slots))
	prodErr := make(chan error, 1)
	stop := make(chan struct{})
	defer close(stop)
	for i := range p.slots {
		free <- i
	}
	go func() {
		defer close(ready)
		for b := 0; b < batches; b++ {
			var i int
			select {
			case i = <-free:
			case <-stop:
				return
			}
			if err := fill(p.slots[i], b); err != nil {
				prodErr <- err
				return
			}
			ready <- item{i, b}
		}
	}()
	for it := range ready {
		s := p.slots[it.slot]
		// H2D on the copy stream. It waits, on the device, for the compute
		// that read s.in two batches ago (write after read).
		if err := sluice.Copy(p.copyS, s.in, 0, s.pin, 0, p.nbytes); err != nil {
			return err
		}
		free <- it.slot // the producer waits (WaitWrite) for this copy before refilling
		// Compute on the compute stream: waits for the copy (read after write).
		if err := p.computeSlot(p.compS, it.slot); err != nil {
			return err
		}
		// Check the previous result of this slot, then copy the new one out.
		if err := p.check(s); err != nil {
			return err
		}
		if err := sluice.Copy(p.compS, s.res, 0, s.out, 0, p.nbytes); err != nil {
			return err
		}
		s.pending = it.batch
	}
	select {
	case err := <-prodErr:
		return err
	default:
	}
	for _, s := range p.slots {
		if err := p.check(s); err != nil {
			return err
		}
	}
	if err := p.copyS.Synchronize(); err != nil {
		return err
	}
	return p.compS.Synchronize()
}

// runSerial is the baseline without prefetching: one stream, fill, copy,
// compute, copy back and wait, batch after batch.
func (p *pipeline) runSerial(batches int) error {
	s := p.slots[0]
	for b := 0; b < batches; b++ {
		if err := fill(s, b); err != nil {
			return err
		}
		if err := sluice.Copy(p.compS, s.in, 0, s.pin, 0, p.nbytes); err != nil {
			return err
		}
		if err := p.computeSlot(p.compS, 0); err != nil {
			return err
		}
		if err := sluice.Copy(p.compS, s.res, 0, s.out, 0, p.nbytes); err != nil {
			return err
		}
		if err := p.compS.Synchronize(); err != nil {
			return err
		}
		s.pending = b
		if err := p.check(s); err != nil {
			return err
		}
	}
	return nil
}

func measure(name string, batches, nbytes int, run func() error) (float64, error) {
	t0 := time.Now()
	if err := run(); err != nil {
		return 0, err
	}
	el := time.Since(t0).Seconds()
	bps := float64(batches) / el
	fmt.Printf("%-9s %5d batches of %.2f MB in %6.3fs: %8.1f batches/s, %8.1f MB/s H2D\n",
		name, batches, float64(nbytes)/1e6, el, bps, bps*float64(nbytes)/1e6)
	return bps, nil
}

func run() error {
	batches := flag.Int("batches", 200, "number of batches")
	elems := flag.Int("elems", 1<<18, "float32 elements per batch")
	slots := flag.Int("slots", 2, "pipeline slots (2 = double buffering)")
	serial := flag.Bool("serial", true, "also run the serial baseline")
	graphs := flag.Bool("graphs", false, "run the compute step through a graph cache (captured once per slot, then replayed)")
	flag.IntVar(&corruptBatch, "corrupt-batch", -1, "corrupt one input element of this batch (tests the check)")
	flag.Parse()
	if *batches < 1 || *elems < 1 || *slots < 1 {
		return fmt.Errorf("batches, elems and slots must be positive")
	}

	dev, err := sluice.OpenDefaultDevice()
	if err != nil {
		return err
	}
	defer dev.Close()
	props, err := dev.Props()
	if err != nil {
		return err
	}
	fmt.Printf("sluice %s, %v backend: %s\n", sluice.Version(), props.Backend, props.Name)

	p, err := newPipeline(dev, *slots, *elems, *graphs)
	if err != nil {
		return err
	}
	defer p.Close()
	fast, err := measure("prefetch", *batches, p.nbytes, func() error { return p.runPrefetch(*batches) })
	if err != nil {
		return err
	}
	if *serial {
		slow, err := measure("serial", *batches, p.nbytes, func() error { return p.runSerial(*batches) })
		if err != nil {
			return err
		}
		fmt.Printf("prefetch speedup: %.2fx\n", fast/slow)
	}
	for _, s := range []*sluice.Stream{p.copyS, p.compS} {
		st, err := s.Stats()
		if err != nil {
			return err
		}
		fmt.Printf("stream #%d: %d waits inserted, %d events recorded (%d created)\n",
			st.ID, st.Waits, st.Records, st.EventsCreated)
	}
	if p.cache != nil {
		st, err := p.cache.Stats()
		if err != nil {
			return err
		}
		fmt.Printf("graph cache: %d eager, %d captured, %d replayed runs (%d regions)\n",
			st.Eager, st.Captured, st.Replayed, st.Entries)
		want := uint64(*batches)
		if *serial {
			want *= 2
		}
		if got := st.Eager + st.Captured + st.Replayed; got != want {
			return fmt.Errorf("graph cache counted %d runs, want %d", got, want)
		}
	}
	fmt.Println("results OK")
	return nil
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "trainer:", err)
		os.Exit(1)
	}
}
