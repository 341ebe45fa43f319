package main

// The names the trainer uses for the RNG (issue 13) and runtime compilation
// (issue 14), in one place.

import sluice "github.com/sluice-rt/sluice/bindings/go"

type (
	rng           = sluice.RNG
	rngCheckpoint = sluice.RNGCheckpoint
)

var (
	newRNG                   = sluice.NewRNG
	newRNGCheckpoint         = sluice.NewRNGCheckpoint
	deserializeRNGCheckpoint = sluice.DeserializeRNGCheckpoint
)

const (
	rngUniform     = sluice.RNGUniform
	rngNormal      = sluice.RNGNormal
	rngSampleMajor = sluice.RNGSampleMajor
)

func compileModule(dev *sluice.Device, src, name string, opts ...string) (*sluice.Module, error) {
	return dev.CompileModule(src, name, opts...)
}
