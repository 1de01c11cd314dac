//go:build !race

package renderworker

const raceDetector = false
