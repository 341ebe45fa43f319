package main

import (
	"fmt"
	"strings"
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
// two steps). A training step is then 4 kernels
// (model.trainStep):
//
//	gemm_nn_bias_relu_drop  a1 = dropout(relu(x W1 + b1)), split-K     a1, RNG states
//	fwd2_ce              logits = a1 W2 + b2, softmax cross-entropy    dz2, rowloss, right
//	bwd2                 da1, dW2, db2, db1 (column blocks), then      da1, b1, W2, b2,
//	                     SGD with momentum of b1, W2 and b2;           their momentum,
//	                     its last block: the batch's mean loss         losses[step]
//	gemm_tn_sgd          dW1 = x^T da1, then SGD with momentum of W1   W1, its momentum
//
// With -loss-in-bwd2=false a fifth kernel, loss_store, stores the loss
// instead, after fwd2_ce.
//
// The two SGD steps are the products' epilogues: no gradient is written out.
// The source comes in three parts: kernels_primitives.go, kernels_gemm.go
// (the products) and kernels_layers.go (the other kernels).
const kernelSource = kernelPrimitives + kernelGemm + kernelLayers

// kernelNames are the functions the model looks up in the compiled module.
var kernelNames = []string{
	"gemm_nn", "gemm_tn", "gemm_nn_bias_relu", "gemm_nn_bias_relu_drop",
	"gemm_nn_simt", "gemm_tn_simt", "gemm_nn_bias_relu_simt", "gemm_nn_bias_relu_drop_simt",
	"gemm_tn_sgd", "gemm_tn_sgd_simt", "gemm_nn_bf16", "gemm_tn_bf16", "gemm_nn_bias_relu_drop_bf16", "gemm_tn_sgd_bf16",
	"u8_to_f32", "input_f32", "input_bf16", "input_pair_bf16", "f32_to_bf16", "scale_copy", "fwd2_ce", "loss_store", "bwd2",
}

// pdlKernels are the prefixes of the kernels launched with programmatic
// dependent launch by default (flags -pdl, -pdl-kernels): the step's and the
// input stage's, but x W1 (gemm_nn_bias_relu_drop). Launched early, its
// blocks would wait on SMs that x^T da1, the kernel ahead, still needs (run
// 189: the step alone 1.09x faster without it; docs/decisions.md).
var pdlKernels = []string{"gemm_tn_sgd", "fwd2_ce", "loss_store", "bwd2", "input_"}

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
