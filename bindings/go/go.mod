module github.com/sluice-rt/sluice/bindings/go

go 1.24
