package access

import (
	"testing"
	"time"

	proxyv1 "github.com/gitops-fleet/fleet/api/proxy/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/assertion"
)

// TestRevocations: a revoked token stays revoked until it expires, even
// when a later list (from a replica whose cache is behind) omits it; an
// expired one is forgotten.
func TestRevocations(t *testing.T) {
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	r := NewRevocations()
	if !r.Set([]proxyv1.RevokedToken{{ID: "a", Expiry: now.Add(time.Hour)}, {ID: "b", Expiry: now.Add(time.Minute)}}, now) {
		t.Error("a first list changed nothing")
	}
	if !r.Revoked("a") || !r.Revoked("b") || r.Revoked("c") {
		t.Fatalf("revoked: %v", r.List())
	}
	if r.Set([]proxyv1.RevokedToken{{ID: "b", Expiry: now.Add(time.Minute)}}, now.Add(time.Second)) {
		t.Error("a list omitting a live revocation changed the set")
	}
	if !r.Revoked("a") {
		t.Error("a revocation was forgotten before its token expired")
	}
	later := now.Add(time.Minute + assertion.Skew)
	if !r.Set(nil, later) || r.Revoked("b") || !r.Revoked("a") {
		t.Errorf("after b expired: %v", r.List())
	}
	if r.Set([]proxyv1.RevokedToken{{ID: "old", Expiry: now}}, later) || r.Revoked("old") {
		t.Error("an expired token was added to the set")
	}
}
