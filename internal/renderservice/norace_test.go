//go:build !race

package renderservice_test

const raceDetector = false
