//go:build race

package testenv

// raceEnabled: this binary was built with the race detector.
const raceEnabled = true
