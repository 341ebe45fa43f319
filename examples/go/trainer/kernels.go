package main

import (
	"fmt"
	"regexp"
	"strings"
	"sync"
)

// kernelSource is the model's CUDA C, compiled at start-up with NVRTC
// (compileModule). hostkernels.go holds the same math in Go for the host
// backend. Every kernel is deterministic: no float atomics, and each output
// is summed in a fixed order, so that a resumed run is bit-identical to an
// uninterrupted one (the integer counters use atomicAdd, which is exact).
//
// The input stage (model.loadInput), on the input stream beside the step
// before: input_bf16 (or input_f32) turns a batch's pixels into x and copies
// its labels into an input set (input_pair_bf16: two batches, for a graph of
// two steps). A training step is then 3 kernels
// (model.trainStep):
//
//	gemm_nn_bias_relu_drop  a1 = dropout(relu(x W1 + b1)), split-K     a1, RNG states
//	fwd2_ce              logits = a1 W2 + b2, softmax cross-entropy,   dz2, da1, rowloss,
//	                     da1 = (dz2 W2^T) * mask                       right
//	gemm_tn_sgd          dW1 = x^T da1, then SGD with momentum of W1;  W1, b1, W2, b2,
//	                     more blocks (layer2_block): dW2, db2, db1     their momentum,
//	                     and SGD of b1, W2, b2; one: the mean loss     losses[step]
//
// With -loss-in-sgd=false a fourth kernel, loss_store, stores the loss
// instead, after fwd2_ce. With the warpgroup-MMA products the dropout is
// drawn a step ahead: fwd2_ce draws the next step's mask while x W1 runs
// (drop_mask the first step's), and x W1 reads it (docs/decisions.md).
//
// The two SGD steps are the products' epilogues: no gradient is written out.
// The source comes in five parts: kernels_primitives.go, kernelTiles
// (kernels_wgmma.go: the pre-tiled operands' layout), kernels_layers.go (the
// kernels other than the products, and layer2_block), kernels_gemm.go (the
// products) and kernelWgmma (the products by warpgroup MMA, sm_90a).
const kernelSource = kernelPrimitives + kernelTiles + kernelLayers + kernelGemm + kernelWgmma

// kernelNames are the functions the model looks up in the compiled module.
var kernelNames = []string{
	"gemm_nn", "gemm_tn", "gemm_nn_bias_relu", "gemm_nn_bias_relu_drop",
	"gemm_nn_simt", "gemm_tn_simt", "gemm_nn_bias_relu_simt", "gemm_nn_bias_relu_drop_simt",
	"gemm_tn_sgd", "gemm_tn_sgd_simt", "gemm_nn_bf16", "gemm_tn_bf16", "gemm_nn_bias_relu_drop_bf16", "gemm_tn_sgd_bf16",
	"gemm_nn_wg", "gemm_tn_wg", "gemm_nn_bias_relu_drop_wg", "gemm_tn_sgd_wg", "w1_to_bf16_tiled",
	"u8_to_f32", "input_f32", "input_bf16", "input_pair_bf16", "f32_to_bf16", "scale_copy", "fwd2_ce", "loss_store", "drop_mask",
}

// pdlKernels are the prefixes of the kernels launched with programmatic
// dependent launch by default (flags -pdl, -pdl-kernels): the step's and the
// input stage's, and x W1 only in its warpgroup-MMA form. The mma.sync x W1
// (gemm_nn_bias_relu_drop_bf16), launched early, would wait on SMs that x^T
// da1, the kernel ahead, still needs (run 189: the step alone 1.09x faster
// without it); the wgmma one loads x and its dropout mask while it waits,
// and the step alone ran 1.08x faster with it (run 241; docs/decisions.md).
var pdlKernels = []string{"gemm_tn_sgd", "fwd2_ce", "loss_store", "input_", xW1ReadsBeforeWait}

// xW1ReadsBeforeWait is the wgmma x W1, which loads x and its dropout mask
// before pdl_enter: never launched early where a kernel that writes them
// (writesXW1Inputs, name prefixes: the input stage, drop_mask) is the kernel
// ahead of it (model.run).
const xW1ReadsBeforeWait = "gemm_nn_bias_relu_drop_wg"

var writesXW1Inputs = []string{"input_", "drop_mask"}

// kernelDefines (flag -kdefine) are extra macro definitions for the kernel
// source, "NAME=VALUE,...", as NVRTC options -DNAME=VALUE.
var kernelDefines string

// kernelDefinitions are the macro definitions the kernels are compiled
// with: the clusters' flags, then -kdefine's.
func kernelDefinitions() string {
	return fmt.Sprintf("CLUSTER_NN=%d,CLUSTER_TN=%d,%s", gemmClusterNN, gemmClusterTN, kernelDefines)
}

// kernelSourceWithDefines is kernelSource preceded by kernelDefinitions as
// #define lines: what the run would compile, as one file (-dump-kernels).
func kernelSourceWithDefines() string {
	var b strings.Builder
	for _, d := range macros(kernelDefinitions()) {
		name, value, ok := strings.Cut(d, "=")
		if !ok {
			value = "1" // as -DNAME
		}
		fmt.Fprintf(&b, "#define %s %s\n", name, value)
	}
	return b.String() + kernelSource
}

// macros splits "NAME=VALUE,..." into its non-empty entries.
func macros(defs string) []string {
	var out []string
	for _, d := range strings.Split(defs, ",") {
		if d = strings.TrimSpace(d); d != "" {
			out = append(out, d)
		}
	}
	return out
}

func defineOptions(defs string) []string {
	opts := macros(defs)
	for i, d := range opts {
		opts[i] = "-D" + d
	}
	return opts
}

// kernelParams maps each kernel of kernelSource to its number of
// parameters, as the source declares them: the host backend checks each
// launch's arguments against it (model.run), as the driver does on cuda. A
// kernel declared in a macro (NAME##SUFFIX) stands for every suffix, and
// GEMM_ARGS counts as its parameters.
var kernelParams = sync.OnceValue(func() map[string]int {
	gemmArgs := strings.Count(regexp.MustCompile(`#define GEMM_ARGS ([^\n]*)`).FindStringSubmatch(kernelSource)[1], ",") + 1
	decl := regexp.MustCompile(`__global__\s+void\s+(?:ATTR[NT][\s\\]+)?(?:__launch_bounds__\([^)]*\)[\s\\]*)?([a-z0-9_]+)(?:##SUFFIX)?\(`)
	params := map[string]int{}
	for _, m := range decl.FindAllStringSubmatchIndex(kernelSource, -1) {
		name := kernelSource[m[2]:m[3]]
		list, _, _ := strings.Cut(kernelSource[m[1]:], ")")
		n := strings.Count(list, ",") + 1
		if strings.Contains(list, "GEMM_ARGS") {
			n += gemmArgs - 1
		}
		params[name] = n
	}
	return params
})

// kernelParamCount is kernelParams' count for a kernel name, whose suffix
// (_bf16, _simt) a macro may have added.
func kernelParamCount(name string) (int, bool) {
	for _, base := range []string{name, strings.TrimSuffix(name, "_bf16"), strings.TrimSuffix(name, "_simt")} {
		if n, ok := kernelParams()[base]; ok {
			return n, true
		}
	}
	return 0, false
}
