package controller_test

import (
	"context"
	"strings"
	"testing"

	"github.com/gitops-fleet/fleet/controller"
)

func TestNew_RefusesANegativeNumberOfBundleWriters(t *testing.T) {
	// A negative limit would lift errgroup's limit altogether: one
	// goroutine per cluster of a Bundle.
	_, err := controller.New(context.Background(), controller.Options{BundleWriters: -1})
	if err == nil || !strings.Contains(err.Error(), "--bundle-writers is -1") {
		t.Fatalf("want a refusal naming the flag, got %v", err)
	}
}
