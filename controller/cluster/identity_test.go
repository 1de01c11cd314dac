package cluster

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/registration"
)

func TestIdentityKeyToRecord(t *testing.T) {
	key := func() string {
		k, err := registration.NewIdentityKey()
		if err != nil {
			t.Fatal(err)
		}
		return k.PublicKey()
	}
	old, cur := key(), key()
	signedBy := func(k string) *fleet.ClusterRegistration {
		return &fleet.ClusterRegistration{Spec: fleet.ClusterRegistrationSpec{IdentityPublicKey: k, IdentitySignature: "sig"}}
	}
	unsigned := &fleet.ClusterRegistration{}
	for name, tc := range map[string]struct {
		recorded, reported string
		newest             *fleet.ClusterRegistration
		want               string
	}{
		"upgraded agent reports its key; registered unsigned": {recorded: "", reported: cur, newest: unsigned, want: cur},
		"upgraded agent, no registration in the cache":        {recorded: "", reported: cur, newest: nil, want: cur},
		"heartbeat of the recorded key":                       {recorded: cur, reported: cur, newest: signedBy(cur), want: ""},
		"stale heartbeat after a grant to another key":        {recorded: cur, reported: old, newest: signedBy(cur), want: ""},
		"grant's key lost (crash, restore): recorded again":   {recorded: old, reported: cur, newest: signedBy(cur), want: cur},
		"key removed by hand while the grant stands":          {recorded: "", reported: cur, newest: signedBy(cur), want: cur},
		"unsigned re-registration: the live agent's report":   {recorded: old, reported: cur, newest: unsigned, want: cur},
		"malformed report":                         {recorded: "", reported: "bm90IGEga2V5", newest: unsigned, want: ""},
		"malformed key in the newest registration": {recorded: old, reported: cur, newest: signedBy("???"), want: ""},
	} {
		if got := identityKeyToRecord(tc.recorded, tc.reported, tc.newest); got != tc.want {
			t.Errorf("%s: got %q, want %q", name, got, tc.want)
		}
	}
}

func TestNewer_OrdersByCreationThenRequestTime(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	reg := func(created time.Time, requested string) *fleet.ClusterRegistration {
		return &fleet.ClusterRegistration{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(created),
			Annotations: map[string]string{registration.RequestedAtAnnotation: requested}}}
	}
	a, b := reg(at, at.Format(time.RFC3339Nano)), reg(at.Add(time.Second), at.Format(time.RFC3339Nano))
	if !newer(b, a) || newer(a, b) {
		t.Error("creation time does not order")
	}
	c := reg(at, at.Add(300*time.Millisecond).Format(time.RFC3339Nano))
	if !newer(c, a) || newer(a, c) {
		t.Error("request time does not order within one second")
	}
}
