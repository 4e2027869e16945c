//go:build race

package slidelimit

// raceEnabled is set under the race detector, whose sync.Pool drops items
// at random: allocation counts mean nothing there.
const raceEnabled = true
