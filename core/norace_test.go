//go:build !race

package slidelimit

const raceEnabled = false
