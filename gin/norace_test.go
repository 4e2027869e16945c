//go:build !race

package ginlimit_test

const raceEnabled = false
