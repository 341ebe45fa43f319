//go:build !race

package sluice

// raceEnabled: see race_on_test.go.
const raceEnabled = false
