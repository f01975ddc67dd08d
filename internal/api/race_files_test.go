//go:build race

package api

// raceDetector: the race detector slows copying; volume tests move less.
const raceDetector = true
