//go:build race

package fiberlimit_test

// raceEnabled is set under the race detector, whose sync.Pool drops items
// at random: allocation counts mean nothing there.
const raceEnabled = true
