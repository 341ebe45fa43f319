//go:build race

package sluice

// raceEnabled: the race detector is on (it changes allocation counts, and
// sync.Pool drops items at random under it).
const raceEnabled = true
