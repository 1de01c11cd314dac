package controller_test

import (
	"os"

	"go.uber.org/zap/zapcore"
)

// zapLevel keeps test logs quiet unless FLEET_TEST_LOG=debug.
func zapLevel() zapcore.Level {
	if os.Getenv("FLEET_TEST_LOG") == "debug" {
		return zapcore.DebugLevel
	}
	return zapcore.ErrorLevel
}
