//go:build race

package renderworker

// raceDetector: this test binary, and so every worker it starts, runs with
// the race detector, whose shadow memory counts against RLIMIT_AS.
const raceDetector = true
