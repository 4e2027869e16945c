//go:build !race

package echolimit_test

const raceEnabled = false
