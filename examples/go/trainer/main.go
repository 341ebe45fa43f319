// Command trainer trains an MLP classifier on MNIST from Go through sluice:
// inputs-H-10 (H = -hidden, 512 by default), ReLU, dropout, softmax
// cross-entropy, SGD with momentum.
//
// It uses the library as a Go trainer would, with no LockOSThread:
//   - the prefetcher: producer goroutines fill shuffled batches in place in
//     its pinned slots (Acquire/Submit; two batches a slot when a graph runs
//     two steps; the images gathered by sluice.GatherRows' non-temporal stores),
//     and the training stream takes each slot with Next: one kernel reads
//     its batches in place into the fixed input buffers of the next pair of
//     steps (x / 255 and the labels), then Release. That kernel
//     ends the graph of the pair before (-input-in-graph, a graph per slot);
//     with -input-in-graph=false it runs on an input stream of its own;
//   - the RNG: the weights are drawn from it (normal, scaled), and dropout
//     draws from its per-element states inside the kernel (<sluice/rng.cuh>);
//     its checkpoint is saved with the weights;
//   - a GraphCache: the training step (3 kernels) is captured once and
//     replayed, two steps per graph over four input sets (-graph-steps 1:
//     a step per graph; -eager: launched op by op);
//   - sync objects for all ordering: every kernel names the buffers it
//     reads and writes (a leased batch is ordered by its lease, Next to
//     Release), and evaluation runs on a second stream that reads the
//     parameters while the next epoch's updates wait for it.
//
// On the cuda backend the kernels are CUDA C (kernels*.go) compiled at
// start-up with NVRTC. On the host backend, which cannot run kernels, the
// same math runs in Go as host callbacks on the same streams
// (hostkernels.go), deterministically.
//
// -save writes weights, momentum, the RNG checkpoint and the data position
// after the last epoch; -resume continues from such a file, and a resumed run
// gives the same per-step losses (-losses) and final weights, bit for bit, as
// an uninterrupted one.
//
//	go run . -epochs 5                       # SLUICE_BACKEND=auto: cuda if present
//	SLUICE_BACKEND=host go run . -limit 8192 -hidden 64 -test-limit 2000
//	go run . -epochs 2 -save ck.bin && go run . -epochs 5 -resume ck.bin
//	go run . -eager                          # the step op by op, not replayed
//	go run . -eager -eager-pairs=false       # the same, a batch per lease
//	go run . -blocking                       # a blocking copy per batch, no prefetcher
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	sluice "github.com/sluice-rt/sluice/bindings/go"
)

type options struct {
	epochs, batch, hidden  int
	limit, testLimit       int
	lr, momentum, wd, drop float64
	seed                   uint64
	save, resume, losses   string
	eager, graph, blocking bool
	overlapInput           bool
	inputInGraph           bool
	lossInSGD              bool
	pdl                    bool
	pdlKernels             string
	benchSteps, benchInput int
	graphSteps             int
	eagerPairs             bool
	depth, producers       int
	hugePages              bool
	data                   string
	gemm                   string
	cpuProfile             string
	cpuProfileHz           int
	dumpKernels            string
}

func parseFlags() (*options, error) {
	o := &options{}
	flag.IntVar(&o.epochs, "epochs", 5, "train until this many epochs are done (counting those of -resume)")
	flag.IntVar(&o.batch, "batch", 256, "batch size")
	flag.IntVar(&o.hidden, "hidden", 512, "hidden units")
	flag.IntVar(&o.limit, "limit", 0, "use the first N training images (0: all 60000)")
	flag.IntVar(&o.testLimit, "test-limit", 0, "evaluate on the first N test images (0: all 10000)")
	flag.Float64Var(&o.lr, "lr", 0.1, "learning rate")
	flag.Float64Var(&o.momentum, "momentum", 0.9, "SGD momentum")
	flag.Float64Var(&o.wd, "wd", 0, "weight decay")
	flag.Float64Var(&o.drop, "dropout", 0.1, "dropout probability of the hidden layer")
	flag.Uint64Var(&o.seed, "seed", 1, "seed of the shuffle and of the RNG")
	flag.StringVar(&o.save, "save", "", "write a checkpoint to this file after the last epoch")
	flag.StringVar(&o.resume, "resume", "", "continue from this checkpoint")
	flag.StringVar(&o.losses, "losses", "", "write the loss of every step to this file (exact, in hex)")
	flag.BoolVar(&o.eager, "eager", false, "launch the training step op by op (no graph)")
	flag.BoolVar(&o.graph, "graph", true, "replay the training step from a graph cache")
	flag.BoolVar(&o.blocking, "blocking", false, "copy each batch with a blocking copy, without the prefetcher")
	flag.BoolVar(&o.overlapInput, "overlap-input", true, "run each batch's input stage on a stream of its own, into one of two input sets, while the step before runs (false: on the training stream, one set); with two steps per graph or lease, -input-in-graph decides")
	flag.BoolVar(&o.lossInSGD, "loss-in-sgd", true, "the step's last kernel (gemm_tn_sgd) stores the batch's loss in one more block (false: a kernel of its own, loss_store)")
	flag.BoolVar(&o.eagerPairs, "eager-pairs", true, "with -eager, the prefetcher and -overlap-input: lease two batches per slot (-graph-steps 4: four) and run their input stage as the replayed loop does, so that only the step's issue differs from it (false: a batch per lease)")
	flag.BoolVar(&o.inputInGraph, "input-in-graph", true, "with two steps per graph or lease: lease the next pair's batches before this pair's steps and run their input stage on the training stream after them, in the same graph (one graph per slot), so that a pair costs the host a lease, a graph launch and a release (false: each pair's input stage on the input stream, issued before its graph)")
	flag.IntVar(&o.graphSteps, "graph-steps", 2, "replayed steps with the prefetcher and -overlap-input: training steps per captured graph, 1, 2 or 4 (n > 1: a graph runs the steps of n batches, leased together, read from 2n input sets; -eager with -eager-pairs leases as many)")
	flag.IntVar(&o.benchSteps, "bench-steps", 0, "after training (and -save), time this many more steps on the last batch without the input pipeline")
	flag.IntVar(&o.benchInput, "bench-input", 0, "instead of training, time this many batches through the prefetcher into the input sets, with no step")
	flag.IntVar(&o.depth, "depth", 16, "prefetcher slots")
	flag.BoolVar(&o.hugePages, "huge-pages", true, "keep the training images in memory backed by huge pages (Linux, madvise), so that the producers' row gathers miss the TLB less")
	flag.BoolVar(&streamStores, "stream-stores", true, "the producers gather the images into the prefetcher's slots with sluice.GatherRows (non-temporal stores, which do not read the lines first); false: Go's copy")
	flag.IntVar(&o.producers, "producers", 4, "producer goroutines (each gathers its batches from the shuffled images)")
	flag.StringVar(&o.data, "data", "", "directory of the MNIST .gz files (default: ./mnist next to the binary, or the GoMNIST module)")
	flag.StringVar(&o.pdlKernels, "pdl-kernels", strings.Join(pdlKernels, ","), "with -pdl: the comma-separated name prefixes of the kernels launched with programmatic dependent launch")
	flag.BoolVar(&o.pdl, "pdl", true, "cuda, compute capability 9.0+: launch the step's kernels with programmatic dependent launch (each may start while the one ahead finishes)")
	flag.StringVar(&o.gemm, "gemm", "wgmma", "cuda: the training step's products: wgmma (warpgroup MMA on pre-tiled bf16 operands, compute capability 9.0), bf16 or tf32 (mma.sync), or fp32; a start-up self-test falls back in that order")
	flag.IntVar(&gemmKChunkNN, "kchunk", gemmKChunkNN, "cuda: K per block of the split-K product x W1 (a multiple of 32; TF32 and FP32, and BF16 with -cluster 0)")
	flag.IntVar(&gemmKChunkTN, "kchunk-tn", gemmKChunkTN, "cuda: K per block of the split-K product x^T da1 (a multiple of 32; TF32 and FP32, and BF16 with -cluster-tn 0)")
	flag.IntVar(&gemmClusterNN, "cluster", gemmClusterNN, "cuda, bf16: blocks of the cluster that splits the K of x W1 (1, 2, 4 or 8; 0: split by -kchunk)")
	flag.IntVar(&gemmClusterTN, "cluster-tn", gemmClusterTN, "cuda, bf16: blocks of the cluster that splits the K of x^T da1 (1, 2, 4 or 8; 0: split by -kchunk-tn)")
	flag.StringVar(&o.cpuProfile, "cpuprofile", "", "write a Go CPU profile of the run to this file (go tool pprof)")
	flag.IntVar(&o.cpuProfileHz, "cpuprofile-hz", 0, "with -cpuprofile: samples per second (0: Go's 100; an epoch of the replayed loop takes 4 ms)")
	flag.StringVar(&o.dumpKernels, "dump-kernels", "", "write the kernels' CUDA C source, with the macro definitions the run would pass to NVRTC, to this file and exit (tools/sass reads it)")
	flag.StringVar(&kernelDefines, "kdefine", "", "cuda: extra macro definitions for the kernels, comma-separated (for example NSTAGE_H=4), for sweeps")
	flag.Parse()
	if o.eager {
		o.graph = false
	}
	switch {
	case o.epochs < 1 || o.batch < 1 || o.hidden < 1 || o.limit < 0 || o.testLimit < 0:
		return nil, errors.New("-epochs, -batch and -hidden must be positive, -limit and -test-limit not negative")
	case o.gemm != "wgmma" && o.gemm != "bf16" && o.gemm != "tf32" && o.gemm != "fp32":
		return nil, fmt.Errorf("-gemm must be wgmma, bf16, tf32 or fp32, not %q", o.gemm)
	case o.drop < 0 || o.drop >= 1:
		return nil, errors.New("-dropout must be in [0, 1)")
	case gemmKChunkNN < gemmBK || gemmKChunkNN%gemmBK != 0 || gemmKChunkTN < gemmBK || gemmKChunkTN%gemmBK != 0:
		return nil, fmt.Errorf("-kchunk and -kchunk-tn must be positive multiples of %d", gemmBK)
	case !validCluster(gemmClusterNN) || !validCluster(gemmClusterTN):
		return nil, errors.New("-cluster and -cluster-tn must be 0, 1, 2, 4 or 8")
	case o.graphSteps != 1 && o.graphSteps != 2 && o.graphSteps != 4:
		return nil, errors.New("-graph-steps must be 1, 2 or 4")
	case o.depth < 1 || o.producers < 1:
		return nil, errors.New("-depth and -producers must be positive")
	case flag.NArg() > 0:
		return nil, fmt.Errorf("unexpected arguments: %q", flag.Args())
	}
	return o, nil
}

func modeName(o *options) string {
	m := "graph"
	if !o.graph {
		m = "eager"
		if !o.eagerPairs && o.overlapInput && !o.blocking {
			m = "eager-batch-per-lease"
		}
	}
	in := "prefetch"
	if o.blocking {
		in = "blocking"
	}
	return m + "," + in
}

func run() (err error) {
	o, err := parseFlags()
	if err != nil {
		return err
	}
	if o.dumpKernels != "" {
		return os.WriteFile(o.dumpKernels, []byte(kernelSourceWithDefines()), 0o644)
	}
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if o.cpuProfileHz > 0 {
			runtime.SetCPUProfileRate(o.cpuProfileHz) // before StartCPUProfile, which then warns
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	dir, err := findMNIST(o.data)
	if err != nil {
		return err
	}
	t0 := time.Now()
	d, err := loadMNIST(dir, o.limit, o.testLimit, o.hugePages)
	if err != nil {
		return err
	}
	smp := newSampler(d, o.batch, o.seed)
	if smp.nb == 0 {
		return fmt.Errorf("%d training images make no batch of %d", len(d.trainY), o.batch)
	}
	nTrain := smp.nb * o.batch

	dev, err := sluice.OpenDefaultDevice()
	if err != nil {
		return err
	}
	defer dev.Close()
	// A trace (SLUICE_TRACE=path) must be stopped before the program ends:
	// Go's exit does not run the library's atexit hook, so without the stop
	// what the last 100 ms buffered is lost, with every device span
	// (SLUICE_TRACE_DEVICE=1) still pending. Deferred here, it runs after the
	// training and evaluation, before the device closes.
	defer func() {
		if err := sluice.TraceStop(); err != nil {
			fmt.Fprintln(os.Stderr, "trainer: stopping the trace:", err)
		}
	}()
	props, err := dev.Props()
	if err != nil {
		return err
	}
	fmt.Printf("sluice %s, %v backend: %s\n", sluice.Version(), props.Backend, props.Name)
	fmt.Printf("MNIST from %s: %d training images (%d batches of %d), %d test images, loaded in %.2fs\n",
		dir, len(d.trainY), smp.nb, o.batch, len(d.testY), time.Since(t0).Seconds())

	// The streams: training; evaluation; the input stage, which reads each
	// batch into the input buffers of the step after next (model.useInput),
	// beside the step before it.
	var streams [3]*sluice.Stream
	for i, label := range []string{"train", "eval", "input"} {
		if streams[i], err = dev.NewStream(sluice.StreamNonBlocking, 0); err != nil {
			return err
		}
		defer streams[i].Close()
		streams[i].SetLabel("trainer: " + label)
	}
	train, evalS, inS := streams[0], streams[1], streams[2]
	var pdl []string // the kernels launched with programmatic dependent launch
	if o.pdl {
		pdl = strings.Split(o.pdlKernels, ",")
	}

	hp := hyper{batch: o.batch, hidden: o.hidden, dropout: float32(o.drop),
		lr: float32(o.lr), mu: float32(o.momentum), wd: float32(o.wd), rngSeed: o.seed, gemm: o.gemm, pdlKernels: pdl}
	m, err := newModel(dev, train, hp, smp.nb, d.testX, d.testY)
	if err != nil {
		return err
	}
	defer m.Close()
	// group steps per graph, or eagerly per lease (-eager-pairs), read 2
	// group input sets, half of them per lease in turn.
	group := 1
	if o.overlapInput && !o.blocking && (o.graph && o.graphSteps > 1 || !o.graph && o.eagerPairs) {
		group = max(o.graphSteps, 2)
		m.sets = 2 * group
	}
	m.lossInSGD = o.lossInSGD
	fmt.Printf("model %d-%d-%d: %d parameters, dropout %.2f, SGD lr %g momentum %g; %s\n",
		inputs, o.hidden, classes, m.nParams, o.drop, o.lr, o.momentum, modeName(o))

	hdr := ckptHeader{Hidden: uint32(o.hidden), Batch: uint32(o.batch), Train: uint32(len(d.trainY)),
		ShuffleSeed: o.seed, RNGSeed: o.seed, Dropout: hp.dropout, LR: hp.lr, Momentum: hp.mu, WeightDecay: hp.wd}
	start, maskLoaded := 0, false
	if o.resume != "" {
		if start, maskLoaded, err = resume(o.resume, hdr, dev, train, m); err != nil {
			return err
		}
		fmt.Printf("resumed from %s after epoch %d\n", o.resume, start)
	} else if err := m.initParams(train); err != nil {
		return err
	}
	if !maskLoaded {
		if err := m.drawFirstMask(train); err != nil {
			return err
		}
	}
	if start >= o.epochs {
		return fmt.Errorf("the checkpoint is after epoch %d, and -epochs is %d", start, o.epochs)
	}
	if err := m.halfWeights(train); err != nil {
		return err
	}

	var lossOut *bufio.Writer
	if o.losses != "" {
		f, ferr := os.Create(o.losses)
		if ferr != nil {
			return ferr
		}
		lossOut = bufio.NewWriter(f)
		// The losses are what a resumed run is checked against: a failed write
		// fails the run.
		defer func() { err = errors.Join(err, lossOut.Flush(), f.Close()) }()
	}

	if o.benchInput > 0 {
		return benchInput(dev, inS, m, smp, o)
	}

	// The batches of epochs start..epochs-1, from the prefetcher or copied;
	// for groups of steps, a group's batches per slot.
	plan := slotPlan{per: group, nb: smp.nb, first: start}
	var pf *sluice.Prefetcher
	var stopProducers func() error
	var producing producerTimes
	if !o.blocking {
		if pf, stopProducers, err = startInput(dev, smp, o, plan, (o.epochs-start)*plan.perEpoch(), &producing); err != nil {
			return err
		}
		defer func() {
			if stopProducers != nil {
				stopProducers()
			}
		}()
	}
	hostBatch := make([]byte, o.batch*(inputs+1)) // the blocking path's: pixels, then labels
	var cache *sluice.GraphCache
	if o.graph {
		if cache, err = sluice.NewGraphCache(dev); err != nil {
			return err
		}
		defer cache.Close()
	}
	lossPin, err := dev.AllocPinned(4 * smp.nb)
	if err != nil {
		return err
	}
	defer lossPin.Close()
	statPin, err := dev.AllocPinned(8)
	if err != nil {
		return err
	}
	defer statPin.Close()
	evalPin, err := dev.AllocPinned(4)
	if err != nil {
		return err
	}
	defer evalPin.Close()
	// The RNG checkpoint is made before any capture (it may not be made
	// during one); the save into it is a stream-ordered copy.
	var rck *rngCheckpoint
	if o.save != "" {
		if rck, err = newRNGCheckpoint(train, m.rng); err != nil {
			return err
		}
		defer rck.Close()
	}

	var acc float64
	var rates []float64 // steps/s of each epoch of this process
	var batchWait time.Duration
	groupN := 0       // groups of steps issued
	groupInput := inS // the stream of a group's input stage outside a graph
	if o.inputInGraph {
		groupInput = train
	}
	for e := start; e < o.epochs; e++ {
		if err := sluice.Memset(train, m.trainStats, 0, 0, 8); err != nil {
			return err
		}
		te := time.Now()
		var enqueue time.Duration // host time spent issuing the steps
		var ph inputPhases
		for i := 0; i < smp.nb; i++ {
			if n := min(group, smp.nb-i); n > 1 {
				// Batches i..i+n-1 in the sets of this group (the group before
				// read the other half), then one graph of their steps. With
				// -input-in-graph the group before wrote them (the epoch's
				// first group: an input stage of its own), and this graph ends
				// with the next group's input stage (unless that is a single
				// batch, which a step of its own reads).
				first := group * (groupN % 2)
				if !o.inputInGraph || i == 0 {
					m.parity = first
					if err := nextInput(pf, groupInput, m, &ph, n); err != nil {
						return err
					}
				}
				var next *sluice.Batch
				nextN := min(group, smp.nb-i-n)
				if o.inputInGraph && nextN > 1 {
					t0 := time.Now()
					if next, err = pf.Next(train, sluice.WaitForever); err != nil {
						return err
					}
					ph.next += time.Since(t0)
				}
				m.parity = first
				groupN++
				ts := time.Now()
				err = m.stepGroup(cache, train, n, next, nextN)
				enqueue += time.Since(ts)
				if next != nil {
					t0 := time.Now()
					err = errors.Join(err, next.Release())
					ph.release += time.Since(t0)
				}
				if err != nil {
					return fmt.Errorf("epoch %d steps %d to %d: %w", e+1, i, i+n-1, err)
				}
				i += n - 1
				continue
			}
			copyS := train
			if o.overlapInput {
				m.useInput(e*smp.nb + i)
				copyS = inS
			}
			if o.blocking {
				// Fill, then a synchronous copy that waits for the step that
				// read the input buffers last: no overlap.
				smp.fillBatch(hostBatch, e*smp.nb+i)
				if err := sluice.CopyFromHost(train, m.stage, 0, hostBatch); err != nil {
					return err
				}
				if err := m.loadInput(train, m.staged()); err != nil {
					return err
				}
			} else if err := nextInput(pf, copyS, m, &ph, 1); err != nil {
				return err
			}
			ts := time.Now()
			err = m.step(cache, train)
			enqueue += time.Since(ts)
			if err != nil {
				return fmt.Errorf("epoch %d step %d: %w", e+1, i, err)
			}
		}
		if err := sluice.Copy(train, lossPin, 0, m.losses, 0, 4*smp.nb); err != nil {
			return err
		}
		if err := sluice.Copy(train, statPin, 0, m.trainStats, 0, 8); err != nil {
			return err
		}
		if err := lossPin.WaitRead(); err != nil {
			return err
		}
		if err := statPin.WaitRead(); err != nil {
			return err
		}
		el := time.Since(te).Seconds()
		lastRate := float64(smp.nb) / el
		rates = append(rates, lastRate)
		stats := sluice.SliceOf[uint32](statPin.Bytes())
		if int(stats[0]) != smp.nb {
			return fmt.Errorf("epoch %d: the device counted %d steps, want %d", e+1, stats[0], smp.nb)
		}
		losses := sluice.SliceOf[float32](lossPin.Bytes())[:smp.nb]
		var sum float64
		for i, l := range losses {
			sum += float64(l)
			if lossOut != nil {
				fmt.Fprintf(lossOut, "%d %d %08x %.7g\n", e+1, i, math.Float32bits(l), l)
			}
		}
		// Evaluation on its own stream, after this epoch's last update.
		right, err := m.evaluate(evalS, evalPin)
		if err != nil {
			return err
		}
		acc = float64(right) / float64(max(len(d.testY), 1))
		perStep := func(d time.Duration) float64 { return d.Seconds() * 1e6 / float64(smp.nb) }
		// The time this epoch's steps waited for the prefetcher's batches, and
		// the input stage's host time outside the graphs.
		waiting := ""
		if pf != nil {
			if ps, err := pf.Stats(); err == nil {
				waiting = fmt.Sprintf(", %.1f waiting for batches", perStep(ps.ConsumerWait-batchWait))
				batchWait = ps.ConsumerWait
			}
			waiting += fmt.Sprintf(" (input: Next %.1f, stage %.1f, Release %.1f)", perStep(ph.next), perStep(ph.stage), perStep(ph.release))
		}
		fmt.Printf("epoch %d/%d: loss %.4f  train acc %.4f  test acc %.4f  |  %d steps in %.2fs: %.1f steps/s, %.1f us/step issuing%s\n",
			e+1, o.epochs, sum/float64(smp.nb), float64(stats[1])/float64(nTrain), acc, smp.nb, el, lastRate,
			perStep(enqueue), waiting)
	}

	if stopProducers != nil {
		ps, err := pf.Stats()
		if err == nil {
			fmt.Printf("prefetcher: %d slots leased for %d steps, %d per slot; producers, us per slot: %v\n",
				ps.Batches, (o.epochs-start)*smp.nb, plan.per, &producing)
		}
		err = errors.Join(err, stopProducers())
		stopProducers = nil
		if err != nil {
			return err
		}
	}
	if cache != nil {
		st, err := cache.Stats()
		if err != nil {
			return err
		}
		per := "a step"
		if group > 1 {
			per = fmt.Sprintf("%d steps", group)
		}
		fmt.Printf("graph cache: %d eager, %d captured, %d replayed (a graph runs %s)\n", st.Eager, st.Captured, st.Replayed, per)
	}
	params := make([]float32, m.nParams)
	if err := sluice.CopyToHostSlice(train, params, m.params, 0); err != nil {
		return err
	}
	fmt.Printf("final weights: crc32c %08x\n", crc32.Checksum(sluice.AsBytes(params), castagnoli))
	if o.save != "" {
		hdr.Epochs = uint32(o.epochs)
		hdr.NextBatch = uint64(o.epochs * smp.nb)
		crc, n, err := save(o.save, hdr, train, m, rck, params)
		if err != nil {
			return err
		}
		fmt.Printf("saved %s after epoch %d: %d bytes, crc32c %08x\n", o.save, o.epochs, n, crc)
	}
	fmt.Printf("RESULT accuracy=%.4f\n", acc)
	fmt.Printf("RESULT steps_per_s=%.1f mode=%s batch=%d hidden=%d (median of %d epochs)\n", steadyRate(rates), modeName(o), o.batch, o.hidden, max(len(rates)-1, 1))
	if o.benchSteps > 0 {
		rate, err := benchSteps(train, m, cache, o.benchSteps, smp.nb, group)
		if err != nil {
			return err
		}
		fmt.Printf("RESULT step_only_steps_per_s=%.1f mode=%s (%d steps on the last batch, no input pipeline)\n", rate, modeName(o), o.benchSteps)
	}
	return nil
}

// startInput creates the prefetcher and starts its producers on slots
// 0..total-1 of plan; stop closes its input, waits for the producers and
// closes it.
func startInput(dev *sluice.Device, smp *sampler, o *options, plan slotPlan, total int, times *producerTimes) (*sluice.Prefetcher, func() error, error) {
	pf, err := sluice.NewPrefetcher(dev, sluice.PrefetcherConfig{Depth: o.depth, Capacities: []int{plan.per * o.batch * (inputs + 1)}})
	if err != nil {
		return nil, nil, err
	}
	wait := startProducers(pf, smp, o.producers, plan, total, times)
	return pf, func() error { return errors.Join(unlessClosed(pf.CloseInput()), wait(), pf.Close()) }, nil
}

// inputPhases sums the host time of nextInput's three calls.
type inputPhases struct{ next, stage, release time.Duration }

// nextInput leases the next slot from the prefetcher on s and runs the input
// stage over it (a kernel per two batches, which reads the slot in place),
// then releases it: the slot is refilled once those kernels are done. The
// slot's n batches go into input sets m.parity, m.parity + 1, ...
// (model.loadInputGroup). ph gets the time of each call added.
func nextInput(pf *sluice.Prefetcher, s *sluice.Stream, m *model, ph *inputPhases, n int) error {
	t0 := time.Now()
	b, err := pf.Next(s, sluice.WaitForever)
	if err != nil {
		return err
	}
	t1 := time.Now()
	src, err := m.prefetched(b)
	if err == nil {
		err = m.loadInputGroup(s, src, n, false)
	}
	t2 := time.Now()
	err = errors.Join(err, b.Release())
	ph.next += t1.Sub(t0)
	ph.stage += t2.Sub(t1)
	ph.release += time.Since(t2)
	return err
}

// benchInput times o.benchInput batches through the input pipeline alone:
// the producers fill them, and the input stage reads each into an input
// set, as the training loop does, with no step.
func benchInput(dev *sluice.Device, inS *sluice.Stream, m *model, smp *sampler, o *options) error {
	var times producerTimes
	pf, stop, err := startInput(dev, smp, o, slotPlan{per: 1, nb: o.benchInput}, o.benchInput, &times)
	if err != nil {
		return err
	}
	c0, err := dev.Counters()
	if err != nil {
		return err
	}
	t0 := time.Now()
	var ph inputPhases
	for i := 0; i < o.benchInput && err == nil; i++ {
		m.useInput(i)
		err = nextInput(pf, inS, m, &ph, 1)
	}
	if err == nil {
		err = inS.Synchronize()
	}
	el := time.Since(t0).Seconds()
	st, stErr := pf.Stats()
	if err = errors.Join(err, stErr, stop()); err != nil {
		return err
	}
	n := float64(o.benchInput)
	fmt.Printf("RESULT input_batches_per_s=%.1f producers=%d depth=%d batch=%d (%d batches, no step)\n",
		n/el, o.producers, o.depth, o.batch, o.benchInput)
	c1, err := dev.Counters()
	if err != nil {
		return err
	}
	fmt.Printf("input driver work per batch (consumer and producers): %.2f stream waits, %.2f event records\n",
		float64(c1.WaitsInserted-c0.WaitsInserted)/n, float64(c1.EventsRecorded-c0.EventsRecorded)/n)
	us := func(d time.Duration) float64 { return d.Seconds() * 1e6 / n }
	fmt.Printf("input phases, us per batch: producers %v; consumer Next %.1f (waiting %.1f), input stage %.1f, Release %.1f\n",
		&times, us(ph.next), us(st.ConsumerWait), us(ph.stage), us(ph.release))
	return nil
}

// benchSteps times n more training steps on the batch already in place, as
// the epochs issue them (replayed or eager) but without the input pipeline:
// the step's own rate. The losses' counter restarts every perEpoch steps, as
// an epoch's does. The weights change: it runs after the checkpoint.
func benchSteps(s *sluice.Stream, m *model, cache *sluice.GraphCache, n, perEpoch, group int) (float64, error) {
	t0 := time.Now()
	for done := 0; done < n; {
		if err := sluice.Memset(s, m.trainStats, 0, 0, 8); err != nil {
			return 0, err
		}
		for i := 0; i < perEpoch && done < n; {
			var err error
			k := min(group, perEpoch-i, n-done)
			if k > 1 {
				m.parity = 0
				err = m.stepGroup(cache, s, k, nil, 0)
			} else {
				err = m.step(cache, s)
			}
			if err != nil {
				return 0, err
			}
			i, done = i+k, done+k
		}
	}
	if err := s.Synchronize(); err != nil {
		return 0, err
	}
	return float64(n) / time.Since(t0).Seconds(), nil
}

// save writes the checkpoint: the RNG's states are saved into rck in stream
// order after the last step, then serialized (which waits for that save).
func save(path string, hdr ckptHeader, s *sluice.Stream, m *model, rck *rngCheckpoint, params []float32) (uint32, int, error) {
	if err := m.rng.Save(s, rck); err != nil {
		return 0, 0, err
	}
	rb, err := rck.Serialize()
	if err != nil {
		return 0, 0, err
	}
	vel := make([]float32, m.nParams)
	if err := sluice.CopyToHostSlice(s, vel, m.vel, 0); err != nil {
		return 0, 0, err
	}
	c := &checkpoint{hdr: hdr, params: params, momentum: vel, rng: rb}
	if m.preDraw {
		c.dropMask = make([]byte, m.dropBits.Size())
		if err := sluice.CopyToHost(s, c.dropMask, m.dropBits, 0); err != nil {
			return 0, 0, err
		}
	}
	crc, err := c.save(path)
	if err != nil {
		return 0, 0, err
	}
	st, err := os.Stat(path)
	if err != nil {
		return 0, 0, err
	}
	return crc, int(st.Size()), nil
}

// resume loads a checkpoint into the model: weights, momentum, the RNG's
// states and the dropout mask drawn ahead, if any. It returns the number of
// epochs done, and whether the checkpoint brought the mask.
func resume(path string, want ckptHeader, dev *sluice.Device, s *sluice.Stream, m *model) (int, bool, error) {
	c, err := loadCheckpoint(path)
	if err != nil {
		return 0, false, err
	}
	if err := c.compatible(want); err != nil {
		return 0, false, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	if len(c.params) != m.nParams {
		return 0, false, fmt.Errorf("checkpoint %s: %d parameters, the model has %d", path, len(c.params), m.nParams)
	}
	if err := sluice.CopyFromHostSlice(s, m.params, 0, c.params); err != nil {
		return 0, false, err
	}
	if err := sluice.CopyFromHostSlice(s, m.vel, 0, c.momentum); err != nil {
		return 0, false, err
	}
	rck, err := deserializeRNGCheckpoint(dev, c.rng)
	if err != nil {
		return 0, false, err
	}
	defer rck.Close() // destroyed after the restore's copy
	if err := m.rng.Restore(s, rck); err != nil {
		return 0, false, err
	}
	switch {
	case len(c.dropMask) == 0:
		return int(c.hdr.Epochs), false, nil
	case !m.preDraw:
		return 0, false, fmt.Errorf("checkpoint %s holds a dropout mask drawn ahead by the warpgroup-MMA step (its RNG states are past it); resume with -gemm wgmma on a device of compute capability 9.0", path)
	case len(c.dropMask) != m.dropBits.Size():
		return 0, false, fmt.Errorf("checkpoint %s: a dropout mask of %d bytes, the model's is %d", path, len(c.dropMask), m.dropBits.Size())
	}
	return int(c.hdr.Epochs), true, sluice.CopyFromHost(s, m.dropBits, 0, c.dropMask)
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "trainer:", err)
		os.Exit(1)
	}
}

// steadyRate is the median steps/s of the epochs after the first (which
// compiles, captures and warms up), or the first's where there is one.
func steadyRate(rates []float64) float64 {
	if len(rates) == 0 {
		return 0
	}
	if len(rates) > 1 {
		rates = rates[1:]
	}
	r := slices.Clone(rates)
	slices.Sort(r)
	if len(r)%2 == 1 {
		return r[len(r)/2]
	}
	return (r[len(r)/2-1] + r[len(r)/2]) / 2
}

// validCluster: 0 (no cluster), or a cluster whose blocks share a tile's 32
// rows evenly, at most the portable cluster size of 8.
func validCluster(n int) bool { return n == 0 || n == 1 || n == 2 || n == 4 || n == 8 }
