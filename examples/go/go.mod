module github.com/sluice-rt/sluice/examples/go

go 1.24

require github.com/sluice-rt/sluice/bindings/go v0.0.0

replace github.com/sluice-rt/sluice/bindings/go => ../../bindings/go
