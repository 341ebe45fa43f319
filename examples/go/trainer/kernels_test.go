package main

import (
	"strings"
	"testing"

	sluice "github.com/sluice-rt/sluice/bindings/go"
)

// TestKernelParams: every kernel the model looks up has a parameter count
// read off the source (the macro-made ones through their base name), the
// counts are those the declarations spell out, and the host backend turns
// a launch with the wrong number of arguments into an error, as the driver
// does, before it enqueues anything.
func TestKernelParams(t *testing.T) {
	for _, name := range kernelNames {
		if _, ok := kernelParamCount(name); !ok {
			t.Errorf("kernel %s: no declaration found in the source", name)
		}
	}
	for name, want := range map[string]int{"loss_store": 4, "fwd2_ce": 19, "drop_mask": 5, "gemm_nn": 9, "gemm_tn_sgd_bf16": 22, "gemm_tn_sgd_wg": 22, "input_pair_bf16": 12} {
		if n, _ := kernelParamCount(name); n != want {
			t.Errorf("kernel %s: %d parameters, want %d", name, n, want)
		}
	}
	m := &model{host: true}
	called := false
	err := m.run(nil, "loss_store", sluice.LaunchConfig{}, nil, nil, func() { called = true }, uint64(0), uint64(0), uint64(0))
	if err == nil || !strings.Contains(err.Error(), `kernel "loss_store" takes 4 parameters`) || called {
		t.Fatalf("3 arguments for loss_store: %v (callback ran: %v)", err, called)
	}
	if err := m.run(nil, "no_such_kernel", sluice.LaunchConfig{}, nil, nil, func() {}); err == nil ||
		!strings.Contains(err.Error(), `no kernel "no_such_kernel"`) {
		t.Fatalf("an unknown kernel: %v", err)
	}
}
