//go:build race

package controller_test

// raceDetector: this test binary, and so every render worker the
// controller starts from it, runs with the race detector, whose shadow
// memory counts against the worker's RLIMIT_AS.
const raceDetector = true
