package v1alpha1_test

import (
	"encoding/json"
	"reflect"
	"testing"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
)

// TestSummaryReadsTheStringOfEarlierReleases: a BundleDeployment status
// written before summaries were objects (a string) still decodes, into the
// object it stands for; the object shape round-trips as Fleet writes it.
func TestSummaryReadsTheStringOfEarlierReleases(t *testing.T) {
	cases := []struct {
		in   string
		want fleet.Summary
	}{
		{`"InProgress: Deployment not ready: 0/1"`, fleet.Summary{State: "in-progress", Transitioning: true, Message: []string{"Deployment not ready: 0/1"}}},
		{`"Failed"`, fleet.Summary{State: "error", Error: true}},
		{`"not found"`, fleet.Summary{State: "missing", Error: true}},
		{`"status unknown: bad conditions"`, fleet.Summary{State: "unknown", Error: true, Message: []string{"bad conditions"}}},
		{`""`, fleet.Summary{}},
		{`{"state":"in-progress","transitioning":true,"message":["a","b"]}`, fleet.Summary{State: "in-progress", Transitioning: true, Message: []string{"a", "b"}}},
	}
	for _, c := range cases {
		var st fleet.BundleDeploymentStatus
		doc := `{"nonReadyStatus":[{"kind":"Deployment","name":"d","summary":` + c.in + `}]}`
		if err := json.Unmarshal([]byte(doc), &st); err != nil {
			t.Errorf("%s: %v", c.in, err)
			continue
		}
		if got := st.NonReadyStatus[0].Summary; !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s decoded to %+v, want %+v", c.in, got, c.want)
		}
	}
	b, err := json.Marshal(fleet.NonReadyStatus{UID: "u", Kind: "Deployment", Summary: fleet.SummaryOf("InProgress", "waiting")})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"uid":"u","kind":"Deployment","summary":{"state":"in-progress","transitioning":true,"message":["waiting"]}}`; string(b) != want {
		t.Errorf("encoded %s, want %s", b, want)
	}
	if err := json.Unmarshal([]byte(`{"summary":42}`), &fleet.NonReadyStatus{}); err == nil {
		t.Errorf("a number decoded as a summary")
	}
}
