package proxy_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/client-go/metadata"

	"github.com/gitops-fleet/fleet/dev/testenv"
	"github.com/gitops-fleet/fleet/proxy"
)

func newRegistry(t *testing.T, ns string) *proxy.Registry {
	t.Helper()
	md, err := metadata.NewForConfig(env.Upstream.Config)
	if err != nil {
		t.Fatal(err)
	}
	r, err := proxy.NewRegistry(proxy.RegistryOptions{Client: env.Upstream.Clientset, Metadata: md, Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return r
}

func revokedIDs(r *proxy.Registry, key string) []string {
	list, _ := r.RevokedForTest(key, time.Now())
	var ids []string
	for _, e := range list {
		ids = append(ids, e.ID)
	}
	return ids
}

// TestRegistry_TwoReplicasAndARestartAgree: the records are the state, so
// two replicas issuing to the same user keep one quota (the oldest are
// revoked whichever replica issued them), serve the same revocation list
// (and ETag), and a replica started afresh counts the same issues against
// the rate limit.
func TestRegistry_TwoReplicasAndARestartAgree(t *testing.T) {
	ctx := t.Context()
	ns := testenv.Namespace(t, env.Upstream.Client, "registry-")
	a, b := newRegistry(t, ns), newRegistry(t, ns)
	const key = "ws/c1"
	start := time.Now().Add(-time.Minute)
	for i := range 14 {
		r := a
		if i%2 == 1 {
			r = b
		}
		if err := r.IssueForTest(ctx, key, "alice", fmt.Sprintf("t%02d", i), start.Add(time.Duration(i)*time.Second)); err != nil {
			t.Fatalf("issue %d: %v", i, err)
		}
	}
	// Both replicas recheck (as both do every 10 s): the quota holds
	// across them.
	allow := authorizerfactory.NewAlwaysAllowAuthorizer()
	for _, r := range []*proxy.Registry{a, b} {
		if _, err := r.Recheck(ctx, allow, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"t00", "t01", "t02", "t03"}
	testenv.Eventually(t, 10*time.Second, "both replicas list the 4 oldest revoked", func() error {
		ga, gb := revokedIDs(a, key), revokedIDs(b, key)
		if !slices.Equal(ga, want) || !slices.Equal(gb, want) {
			return fmt.Errorf("replica A %v, replica B %v, want %v", ga, gb, want)
		}
		_, ea := a.RevokedForTest(key, time.Now())
		_, eb := b.RevokedForTest(key, time.Now())
		if ea != eb {
			return fmt.Errorf("ETags differ: %s, %s", ea, eb)
		}
		return nil
	})
	// A replica started afresh: the same list, and the issues count.
	c := newRegistry(t, ns)
	if got := revokedIDs(c, key); !slices.Equal(got, want) {
		t.Errorf("a restarted replica lists %v, want %v", got, want)
	}
	for i := 14; i < proxy.DefaultDirectIssueLimit; i++ {
		if err := c.IssueForTest(ctx, key, "alice", fmt.Sprintf("t%02d", i), time.Now()); err != nil {
			t.Fatalf("issue %d on the restarted replica: %v", i, err)
		}
	}
	if err := c.IssueForTest(ctx, key, "alice", "over", time.Now()); err == nil {
		t.Errorf("issue %d in an hour on a restarted replica: admitted", proxy.DefaultDirectIssueLimit+1)
	}
	if err := a.IssueForTest(ctx, key, "bob", "bob-1", time.Now()); err != nil {
		t.Errorf("another user: %v", err)
	}
}
