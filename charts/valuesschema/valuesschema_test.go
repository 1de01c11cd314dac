package valuesschema

import (
	"bytes"
	"os"
	"testing"
)

// TestGenerate_FileIsCurrent: charts/fleet/values.schema.json is what the
// rules generate (`make generate`; `make verify` checks it too).
func TestGenerate_FileIsCurrent(t *testing.T) {
	want, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("../../" + Path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is stale: run `make generate` and commit it", Path)
	}
}

// TestGenerate_EveryConfigFieldHasAChartValue: a configuration field the
// chart does not map fails generation with a message saying what to add.
func TestGenerate_EveryConfigFieldHasAChartValue(t *testing.T) {
	saved := ConfigValues["bundleRenderConcurrency"]
	delete(ConfigValues, "bundleRenderConcurrency")
	defer func() { ConfigValues["bundleRenderConcurrency"] = saved }()
	if _, err := Generate(); err == nil || !bytes.Contains([]byte(err.Error()), []byte("bundleRenderConcurrency has no chart value")) {
		t.Errorf("Generate without a mapping: %v", err)
	}
}
