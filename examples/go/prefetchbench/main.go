// Command prefetchbench measures the prefetcher from Go, through the binding:
// 64 MiB batches filled in place (Acquire, Submit) by a producer goroutine, and a
// consumer that takes each batch with Next, launches a spin kernel that reads it
// (tracked on the batch's sync object) and releases it. The kernel's time is set to
// 0.5x, 1x and 2x the copy time measured in the same run. It prints a table with
// the overlap efficiency, max(copy, compute) / step time, and RESULT lines that
// benches/prefetch/run.sh's C figures are compared with.
//
//	go run ./prefetchbench -ptx ../../kernels/test_kernels.ptx
package main

import (
	"encoding/binary"
	"flag"
	"fmt"
	"log"
	"os"
	"time"

	sluice "github.com/sluice-rt/sluice/bindings/go"
)

var (
	ptxPath = flag.String("ptx", "kernels/test_kernels.ptx", "the test kernels' PTX (cuda backend)")
	mib     = flag.Int("mb", 64, "batch size in MiB")
	steps   = flag.Int("n", 60, "measured batches per row")
	warm    = flag.Int("warm", 5, "warm-up batches per row")
)

type bench struct {
	dev    *sluice.Device
	s      *sluice.Stream
	spin   *sluice.Function
	seen   *sluice.Buffer
	blocks uint32
	size   int
}

// run pushes warm+steps batches through a depth-2 prefetcher; each batch is read
// by a kernel that spins spinNs first. It returns the device time per step.
func (b *bench) run(spinNs uint64) time.Duration {
	total := *warm + *steps
	pf, err := sluice.NewPrefetcher(b.dev, sluice.PrefetcherConfig{Depth: 2, Capacities: []int{b.size}})
	check(err)
	defer pf.Close()
	go func() {
		for i := 0; i < total; i++ {
			slot, err := pf.Acquire(sluice.WaitForever)
			check(err)
			binary.LittleEndian.PutUint32(slot.Segment(0)[:4], uint32(i))
			slot.SetLen(0, b.size)
			check(slot.Submit())
		}
		check(pf.CloseInput())
	}()
	var start *sluice.Event
	cfg := sluice.LaunchConfig{Grid: sluice.Dim3{X: b.blocks}, Block: sluice.Dim3{X: 256}}
	for i := 0; i < total; i++ {
		batch, err := pf.Next(b.s, sluice.WaitForever)
		check(err)
		if int(batch.Seq) != i {
			log.Fatalf("batch %d came as %d", i, batch.Seq)
		}
		// seen[i] = the batch's first word, after the spin.
		dst := uintptr(b.seen.DevicePtr() + 4*uint64(i))
		check(b.spin.Launch(b.s, cfg, []sluice.Syncable{batch.Sync(0)}, []sluice.Syncable{b.seen},
			dst, uintptr(batch.DevicePtr(0)), uint64(1), spinNs))
		check(batch.Release())
		if i == *warm-1 {
			start, err = b.s.Record(sluice.EventTiming)
			check(err)
		}
	}
	end, err := b.s.Record(sluice.EventTiming)
	check(err)
	check(b.s.Synchronize())
	got := make([]uint32, total)
	check(sluice.CopyToHostSlice(b.s, got, b.seen, 0))
	for i, v := range got {
		if v != uint32(i) {
			log.Fatalf("step %d read batch %d", i, v)
		}
	}
	d, err := sluice.ElapsedTime(start, end)
	check(err)
	check(start.Close())
	check(end.Close())
	return d / time.Duration(*steps)
}

// kernelTime is the device time of one spin kernel alone.
func (b *bench) kernelTime(spinNs uint64) time.Duration {
	cfg := sluice.LaunchConfig{Grid: sluice.Dim3{X: b.blocks}, Block: sluice.Dim3{X: 256}}
	src := uintptr(b.seen.DevicePtr())
	start, err := b.s.Record(sluice.EventTiming)
	check(err)
	const reps = 10
	for i := 0; i < reps; i++ {
		check(b.spin.Launch(b.s, cfg, nil, []sluice.Syncable{b.seen}, src+4, src, uint64(1), spinNs))
	}
	end, err := b.s.Record(sluice.EventTiming)
	check(err)
	check(b.s.Synchronize())
	d, err := sluice.ElapsedTime(start, end)
	check(err)
	check(start.Close())
	check(end.Close())
	return d / reps
}

func main() {
	flag.Parse()
	dev, err := sluice.OpenDefaultDevice()
	check(err)
	defer dev.Close()
	props, err := dev.Props()
	check(err)
	if props.Backend != sluice.BackendCUDA {
		log.Fatal("prefetchbench needs the cuda backend (SLUICE_BACKEND=cuda)")
	}
	ptx, err := os.ReadFile(*ptxPath)
	check(err)
	mod, err := dev.LoadModule(ptx)
	check(err)
	defer mod.Close()
	spin, err := mod.Function("sluice_spin_copy")
	check(err)
	defer spin.Close()
	s, err := dev.NewStream(sluice.StreamNonBlocking, 0)
	check(err)
	defer s.Close()
	seen, err := s.Alloc(4 * (*warm + *steps + 1))
	check(err)
	defer seen.Close()
	b := &bench{dev: dev, s: s, spin: spin, seen: seen, blocks: uint32(props.MultiprocessorCount), size: *mib << 20}

	b.run(0) // warm-up: module, pools, clocks
	copyStep := b.run(0)
	fmt.Printf("## Prefetcher from Go (%s, %d MiB batches, depth 2)\n\n", props.Name, *mib)
	fmt.Printf("copy-bound step (kernel without spin): %.3f ms = %.2f GB/s\n\n",
		ms(copyStep), float64(b.size)/copyStep.Seconds()/1e9)
	fmt.Println("| compute / copy | copy ms | compute ms | step ms | overlap efficiency |")
	fmt.Println("|---:|---:|---:|---:|---:|")
	for _, r := range []struct {
		name string
		f    float64
	}{{"0.5x", 0.5}, {"1x", 1}, {"2x", 2}} {
		spinNs := uint64(float64(copyStep.Nanoseconds()) * r.f)
		compute := b.kernelTime(spinNs)
		step := b.run(spinNs)
		eff := ms(max(copyStep, compute)) / ms(step)
		fmt.Printf("| %s | %.3f | %.3f | %.3f | %.3f |\n", r.name, ms(copyStep), ms(compute), ms(step), eff)
		fmt.Printf("RESULT go_eff_%s=%.4f go_step_ms_%s=%.4f\n", r.name, eff, r.name, ms(step))
	}
}

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
