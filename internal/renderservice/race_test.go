//go:build race

package renderservice_test

// raceDetector: this test binary, and so the renderer and every worker it
// starts, runs with the race detector.
const raceDetector = true
