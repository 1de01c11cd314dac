package proxy

import (
	"strings"
	"testing"
	"time"

	proxyv1 "github.com/gitops-fleet/fleet/api/proxy/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/assertion"
)

// TestDirectLifetime_NeverOutlivesTheCredential: what is asked, within a
// minute and the maximum, shortened to the credential's remaining life
// (less the agents' clock skew) or, when that is unknown, to the
// unverified maximum; a credential about to expire is a refusal.
func TestDirectLifetime_NeverOutlivesTheCredential(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	const maxLife, unverified = 24 * time.Hour, 15 * time.Minute
	for _, tc := range []struct {
		name       string
		asked      time.Duration
		credExpiry time.Time
		want       time.Duration
		limitedBy  string
		refused    string
	}{
		{"default, long credential", 0, now.Add(8 * time.Hour), time.Hour, "", ""},
		{"8h asked, 10-minute credential", 8 * time.Hour, now.Add(10 * time.Minute), 10*time.Minute - assertion.Skew, proxyv1.LimitedByCredential, ""},
		{"24h asked, credential for a year", 24 * time.Hour, now.Add(365 * 24 * time.Hour), 24 * time.Hour, "", ""},
		{"default, unknown credential", 0, time.Time{}, unverified, proxyv1.LimitedByUnverifiedCredential, ""},
		{"10m asked, unknown credential", 10 * time.Minute, time.Time{}, 10 * time.Minute, "", ""},
		{"credential ends in 30 s", time.Hour, now.Add(30 * time.Second), 0, "", "renew it"},
		{"credential expired", time.Hour, now.Add(-time.Minute), 0, "", "renew it"},
		{"30 s asked", 30 * time.Second, now.Add(time.Hour), 0, "", "between 60 s and 86400 s"},
		{"25h asked", 25 * time.Hour, now.Add(48 * time.Hour), 0, "", "between 60 s and 86400 s"},
	} {
		got, by, err := directLifetime(tc.asked, maxLife, unverified, tc.credExpiry, now)
		if tc.refused != "" {
			if err == nil || !strings.Contains(err.Error(), tc.refused) {
				t.Errorf("%s: want a refusal saying %q, got %s %v", tc.name, tc.refused, got, err)
			}
			continue
		}
		if err != nil || got != tc.want || by != tc.limitedBy {
			t.Errorf("%s: %s limited by %q (%v), want %s by %q", tc.name, got, by, err, tc.want, tc.limitedBy)
		}
	}
}

func TestJWTExpiry(t *testing.T) {
	// header.{"exp":1796400000,"sub":"x"}.sig
	if got := jwtExpiry("e30.eyJleHAiOjE3OTY0MDAwMDAsInN1YiI6IngifQ.c2ln"); !got.Equal(time.Unix(1796400000, 0)) {
		t.Errorf("exp %s", got)
	}
	for _, tok := range []string{"static-token", "e30.bm90LWpzb24.c2ln", "e30.eyJzdWIiOiJ4In0.c2ln", "a.b"} {
		if got := jwtExpiry(tok); !got.IsZero() {
			t.Errorf("%q: exp %s, want none", tok, got)
		}
	}
}
