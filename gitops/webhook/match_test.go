package webhook

import (
	"testing"

	"github.com/gitops-fleet/fleet/gitops/webhook/payload"
	"github.com/gitops-fleet/fleet/gitops/webhook/webhooktest"
)

func TestMatchRef(t *testing.T) {
	main := []payload.RefUpdate{{Ref: "refs/heads/main", Commit: webhooktest.CommitA}}
	for _, c := range []struct {
		ref     string
		refs    []payload.RefUpdate
		follows bool
		commit  string
	}{
		{"refs/heads/main", main, true, webhooktest.CommitA},
		{"refs/heads/dev", main, false, ""},
		{"refs/tags/main", main, false, ""},
		{"refs/heads/main", nil, true, ""},    // the payload names no ref
		{webhooktest.CommitB, nil, false, ""}, // pinned to a commit
		{"", main, false, ""},                 // an invalid branch
		{"refs/tags/v1", []payload.RefUpdate{{Ref: "refs/heads/main"}, {Ref: "refs/tags/v1", Commit: webhooktest.CommitB}}, true, webhooktest.CommitB},
	} {
		follows, commit := matchRef(c.ref, c.refs)
		if follows != c.follows || commit != c.commit {
			t.Errorf("matchRef(%q, %v) = %v, %q; want %v, %q", c.ref, c.refs, follows, commit, c.follows, c.commit)
		}
	}
}
