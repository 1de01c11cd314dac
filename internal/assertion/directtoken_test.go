package assertion

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestDirectRoundTrip(t *testing.T) {
	s := newSigner(t, newKey(t))
	raw, issued, err := s.SignDirect(alice, aud, []string{"get", "delete", "get"}, t0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := issued.Expiry.Sub(issued.IssuedAt); got != DefaultDirectLifetime {
		t.Errorf("default lifetime %s, want %s", got, DefaultDirectLifetime)
	}
	v := NewVerifier(NewKeySet(s.PublicKey()))
	// Used many times: a direct token is a bearer token, not an assertion.
	for range 3 {
		got, err := v.VerifyDirect(raw, aud, t0.Add(30*time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(issued, got); diff != "" {
			t.Errorf("verified token differs from the issued one (-issued +verified):\n%s", diff)
		}
	}
	if !issued.Allows("get") || !issued.Allows("delete") || issued.Allows("create") {
		t.Errorf("verbs %v", issued.Verbs)
	}
	if issued.Identity.Extra["scopes"] != nil || len(issued.Groups) != 2 {
		t.Errorf("identity not filtered as assertions are: %+v", issued.Identity)
	}
}

func TestDirectRefusals(t *testing.T) {
	k := newKey(t)
	s := newSigner(t, k)
	v := NewVerifier(NewKeySet(s.PublicKey()))
	good, _, err := s.SignDirect(alice, aud, DirectVerbs, t0, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	other, _, _ := newSigner(t, newKey(t)).SignDirect(alice, aud, DirectVerbs, t0, time.Hour)
	assertionTok, _ := s.Sign(alice, aud, t0)
	future, _, _ := s.SignDirect(alice, aud, DirectVerbs, t0.Add(time.Hour), time.Hour)

	for _, tc := range []struct {
		name, token, audience string
		at                    time.Time
		want                  error
	}{
		{"expired", good, aud, t0.Add(time.Hour + Skew), ErrInvalid},
		{"another cluster", good, "fleet-default/c2", t0, ErrInvalid},
		{"forged (another key)", other, aud, t0, ErrUnknownKey},
		{"an assertion is not a direct token", assertionTok, aud, t0, ErrInvalid},
		{"issued in the future", future, aud, t0, ErrInvalid},
		{"tampered", good[:len(good)-4] + "AAAA", aud, t0, ErrInvalid},
		{"empty", "", aud, t0, ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := v.VerifyDirect(tc.token, tc.audience, tc.at); !errors.Is(err, tc.want) {
				t.Errorf("got %v, want %v", err, tc.want)
			}
		})
	}
	// And a direct token is never an assertion.
	if _, err := v.Verify(good, aud, t0); !errors.Is(err, ErrInvalid) {
		t.Errorf("a direct token was accepted as an assertion: %v", err)
	}
}

func TestSignDirectBadInput(t *testing.T) {
	s := newSigner(t, newKey(t))
	for name, f := range map[string]func() error{
		"too long": func() error {
			_, _, err := s.SignDirect(alice, aud, DirectVerbs, t0, MaxDirectLifetime+time.Second)
			return err
		},
		"no verbs":    func() error { _, _, err := s.SignDirect(alice, aud, nil, t0, 0); return err },
		"bad verb":    func() error { _, _, err := s.SignDirect(alice, aud, []string{"impersonate"}, t0, 0); return err },
		"no user":     func() error { _, _, err := s.SignDirect(Identity{}, aud, DirectVerbs, t0, 0); return err },
		"no audience": func() error { _, _, err := s.SignDirect(alice, "", DirectVerbs, t0, 0); return err },
	} {
		if f() == nil {
			t.Errorf("%s: signed", name)
		}
	}
}

// TestRequestVerb_StreamsNeedCreate: exec, attach and port-forward need
// create whatever the method (WebSocket clients send GET), as does any
// upgrade; everything else keeps the verb of its method.
func TestRequestVerb_StreamsNeedCreate(t *testing.T) {
	ws := http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}}
	spdy := http.Header{"Connection": {"keep-alive, Upgrade"}, "Upgrade": {"SPDY/3.1"}}
	pod := "/api/v1/namespaces/team/pods/web/"
	for _, tc := range []struct {
		name, method, path string
		header             http.Header
		want               string
	}{
		{"exec over WebSocket", http.MethodGet, pod + "exec", ws, "create"},
		{"attach over WebSocket", http.MethodGet, pod + "attach", ws, "create"},
		{"port-forward over WebSocket", http.MethodGet, pod + "portforward", ws, "create"},
		{"exec over SPDY", http.MethodPost, pod + "exec", spdy, "create"},
		{"exec without upgrade headers", http.MethodGet, pod + "exec", nil, "create"},
		{"exec with a trailing slash", http.MethodGet, pod + "exec/", nil, "create"},
		{"exec through dot segments", http.MethodGet, pod + "log/../exec", nil, "create"},
		{"attach with a head request", http.MethodHead, pod + "attach", nil, "create"},
		{"a node proxy's exec upgraded", http.MethodGet, "/api/v1/nodes/n1/proxy/exec/team/web/c", ws, "create"},
		{"only an Upgrade header", http.MethodGet, "/api", http.Header{"Upgrade": {"websocket"}}, "create"},
		{"Connection upgrade in lower case", http.MethodGet, "/api", http.Header{"Connection": {"upgrade"}}, "create"},
		{"logs", http.MethodGet, pod + "log", nil, "get"},
		{"a pod named exec", http.MethodGet, "/api/v1/namespaces/team/pods/exec", nil, "get"},
		{"a watch", http.MethodGet, "/api/v1/pods?watch=true", http.Header{"Connection": {"keep-alive"}}, "get"},
		{"delete", http.MethodDelete, pod, nil, "delete"},
		{"patch", http.MethodPatch, pod, nil, "patch"},
	} {
		got, ok := RequestVerb(tc.method, tc.header, tc.path)
		if !ok || got != tc.want {
			t.Errorf("%s: %q %v, want %q", tc.name, got, ok, tc.want)
		}
	}
	if _, ok := RequestVerb(http.MethodConnect, ws, pod+"exec"); ok {
		t.Error("CONNECT has a verb")
	}
}
