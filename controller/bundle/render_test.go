package bundle

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/renderworker"
)

func TestRenderFailures_FirstReasonAndEveryFailureWithItsClusters(t *testing.T) {
	timeout := &render{err: &renderworker.RenderError{Reason: fleet.RenderTimeoutReason, Message: "took too long"}}
	ok := &render{contentID: "s-1"}
	remote := &render{err: &renderworker.RenderError{Reason: fleet.RemoteResourceRefusedReason, Message: "remote"}}
	own := &render{err: &renderworker.RenderError{Reason: fleet.BundleTooLargeReason, Message: "too large"}}
	cases := []struct {
		ordered     []*render
		failed      map[*render][]string
		reason, msg string
	}{
		{[]*render{timeout, ok, remote}, map[*render][]string{timeout: {"a", "b"}, remote: {"c"}},
			fleet.RenderTimeoutReason, "clusters a, b: took too long; cluster c: remote"},
		{[]*render{ok, remote, timeout}, map[*render][]string{timeout: {"a"}, remote: {"c"}},
			fleet.RemoteResourceRefusedReason, "cluster c: remote; cluster a: took too long"},
		// No cluster selected: the Bundle's own options, no cluster named.
		{[]*render{own}, map[*render][]string{own: nil}, fleet.BundleTooLargeReason, "too large"},
	}
	for _, tc := range cases {
		reason, msg := renderFailures(tc.ordered, tc.failed)
		if reason != tc.reason || msg != tc.msg {
			t.Errorf("got %s %q, want %s %q", reason, msg, tc.reason, tc.msg)
		}
	}
}

func TestRenderCache_OutcomesLastAsLongAsTheInputs(t *testing.T) {
	var c renderCache
	key := types.NamespacedName{Namespace: "ws", Name: "b"}
	c.store(key, "inputs-1", "opts-a", renderOutcome{contentID: "s-1"})
	c.store(key, "inputs-1", "opts-b", renderOutcome{err: &renderworker.RenderError{Reason: fleet.RenderTimeoutReason}})
	if o, ok := c.lookup(key, "inputs-1", "opts-a"); !ok || o.contentID != "s-1" {
		t.Errorf("opts-a: %+v %v", o, ok)
	}
	if o, ok := c.lookup(key, "inputs-1", "opts-b"); !ok || o.err == nil {
		t.Errorf("opts-b: %+v %v", o, ok)
	}
	// New resources (or limits): everything renders again.
	c.store(key, "inputs-2", "opts-a", renderOutcome{contentID: "s-2"})
	if _, ok := c.lookup(key, "inputs-2", "opts-b"); ok {
		t.Error("opts-b survived an input change")
	}
	if _, ok := c.lookup(key, "inputs-1", "opts-a"); ok {
		t.Error("old inputs still answer")
	}
	c.forget(key)
	if _, ok := c.lookup(key, "inputs-2", "opts-a"); ok {
		t.Error("a deleted Bundle's renders are kept")
	}
}
