//go:build !race

package fiberlimit_test

const raceEnabled = false
