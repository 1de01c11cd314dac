package headers_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/gitops-fleet/fleet/internal/headers"
)

// What fleet-proxy got before it forwarded a user's request: forged
// identities, credentials, a proxy's word on the client, hop-by-hop headers
// (some named by Connection), and two a request needs.
func TestClean_ForwardsNoIdentityCredentialOrHopHeader(t *testing.T) {
	in := func() http.Header {
		return http.Header{
			"Connection":               {"Impersonate-User, X-Secret", "keep-alive, Upgrade"},
			"Upgrade":                  {"SPDY/3.1"},
			"Impersonate-User":         {"admin"},
			"Impersonate-Group":        {"system:masters"},
			"Impersonate-Uid":          {"0"},
			"Impersonate-Extra-Scopes": {"x"},
			"X-Secret":                 {"s"},
			"Authorization":            {"Bearer t"},
			"Proxy-Authorization":      {"Basic x"},
			"X-Remote-User":            {"system:admin"},
			"X-Remote-Extra-Foo":       {"bar"},
			"X-Forwarded-For":          {"1.2.3.4"},
			"X-Forwarded-Host":         {"evil"},
			"Forwarded":                {"for=1.2.3.4"},
			"X-Fleet-Assertion":        {"forged"},
			"Keep-Alive":               {"timeout=5"},
			"Te":                       {"trailers"},
			"Trailer":                  {"X"},
			"Transfer-Encoding":        {"chunked"},
			"Proxy-Connection":         {"keep-alive"},
			"Accept":                   {"application/json"},
			"User-Agent":               {"kubectl"},
			// Not canonical, as a handler could set them.
			"authorization":    {"Bearer lower"},
			"impersonate-user": {"lower"},
		}
	}
	for _, upgrade := range []bool{false, true} {
		h := in()
		headers.Clean(h, upgrade)
		want := http.Header{"Accept": {"application/json"}, "User-Agent": {"kubectl"}}
		if upgrade {
			want["Connection"] = []string{"Upgrade"}
			want["Upgrade"] = []string{"SPDY/3.1"}
		}
		if len(h) != len(want) {
			t.Errorf("upgrade=%v: got %v, want %v", upgrade, h, want)
		}
		for k, v := range want {
			if got := h.Values(k); len(got) != 1 || got[0] != v[0] {
				t.Errorf("upgrade=%v: %s = %q, want %q", upgrade, k, got, v)
			}
		}
	}
	// A request that only claims an upgrade is forwarded as a plain one.
	plain := http.Header{"Connection": {"Upgrade"}}
	headers.Clean(plain, true)
	if len(plain) != 0 {
		t.Errorf("an upgrade without an Upgrade header keeps %v", plain)
	}
	notUpgraded := http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}}
	headers.Clean(notUpgraded, false)
	if len(notUpgraded) != 0 {
		t.Errorf("a plain request keeps %v", notUpgraded)
	}
}

func TestDropIdentity_KeepsTheAssertionAndTheRest(t *testing.T) {
	h := http.Header{
		"Authorization": {"Bearer x"}, "Impersonate-User": {"a"}, "Impersonate-Group": {"g"},
		"X-Remote-User": {"u"}, "X-Forwarded-For": {"1.2.3.4"}, "authorization": {"y"},
		"X-Fleet-Assertion": {"signed"}, "Accept": {"application/json"}, "Connection": {"Upgrade"}, "Upgrade": {"websocket"},
	}
	headers.DropIdentity(h)
	if len(h) != 4 || h.Get("X-Fleet-Assertion") != "signed" || h.Get("Accept") == "" || h.Get("Upgrade") != "websocket" {
		t.Errorf("after DropIdentity: %v", h)
	}
}

func TestImpersonation(t *testing.T) {
	if k, ok := headers.Impersonation(http.Header{"Accept": {"x"}, "impersonate-uid": {"0"}}); !ok || k != "impersonate-uid" {
		t.Errorf("Impersonation = %q, %v", k, ok)
	}
	if _, ok := headers.Impersonation(http.Header{"Accept": {"x"}, "X-Impersonate": {"0"}}); ok {
		t.Error("a header that does not start with Impersonate- was taken for one")
	}
}

// FuzzClean: whatever headers come in, none that carries a credential, an
// identity or a proxy's word leaves, and Connection is at most Upgrade.
func FuzzClean(f *testing.F) {
	f.Add("Connection", "Impersonate-User, Upgrade", "Upgrade", "websocket", true)
	f.Add("X-Remote-User", "admin", "Authorization", "Bearer x", false)
	f.Add("Connection", "X-Fleet-Assertion", "X-Forwarded-Host", "h", true)
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string, upgrade bool) {
		h := http.Header{}
		h.Add(k1, v1)
		h.Add(k2, v2)
		h.Add("Connection", v1)
		h[k2] = append(h[k2], v2) // also as given, not canonical
		headers.Clean(h, upgrade)
		for k, vs := range h {
			l := strings.ToLower(k)
			for _, prefix := range []string{"impersonate-", "x-remote-", "x-forwarded-"} {
				if strings.HasPrefix(l, prefix) {
					t.Fatalf("%s kept: %v", k, h)
				}
			}
			switch l {
			case "authorization", "proxy-authorization", "proxy-connection", "x-fleet-assertion", "forwarded",
				"keep-alive", "te", "trailer", "transfer-encoding":
				t.Fatalf("%s kept: %v", k, h)
			}
			if l == "connection" && (len(vs) != 1 || vs[0] != "Upgrade" || !upgrade) {
				t.Fatalf("Connection %q kept (upgrade %v)", vs, upgrade)
			}
		}
	})
}
