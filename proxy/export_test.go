package proxy

import (
	"context"
	"time"

	proxyv1 "github.com/gitops-fleet/fleet/api/proxy/v1alpha1"
)

// IssueForTest records a token for user as an issue does after signing:
// admission (rate, cluster limit), the record, the quota (benchmarks and
// the registry's tests).
func (r *Registry) IssueForTest(ctx context.Context, key, user, id string, now time.Time) error {
	unlock := r.lock(key, user)
	defer unlock()
	if err := r.admit(key, user, now); err != nil {
		return err
	}
	t := &issued{ID: id, Cluster: key, User: user, UID: "0b6f8f8e-6f1d-4c47-9c4a-1a1b2c3d4e5f", Groups: []string{"devs"},
		Verbs: []string{"create", "get"}, IssuedAt: now, Expiry: now.Add(time.Hour)}
	if err := r.record(ctx, t); err != nil {
		return err
	}
	_, err := r.enforceQuota(ctx, key, user, now)
	return err
}

// RevokedForTest is what the agents of Cluster key read.
func (r *Registry) RevokedForTest(key string, now time.Time) ([]proxyv1.RevokedToken, string) {
	return r.revoked(key, now)
}

// NotConnected is why a Cluster holds no tunnel (the 503's message) and
// the Retry-After.
var NotConnected = notConnected
