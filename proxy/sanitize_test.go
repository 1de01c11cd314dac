package proxy

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestSanitize(t *testing.T) {
	in := http.Header{
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
		"Accept":                   {"application/json"},
		"User-Agent":               {"kubectl"},
	}
	for _, upgrade := range []bool{false, true} {
		out := sanitize(in, upgrade)
		want := http.Header{"Accept": {"application/json"}, "User-Agent": {"kubectl"}}
		if upgrade {
			want["Connection"] = []string{"Upgrade"}
			want["Upgrade"] = []string{"SPDY/3.1"}
		}
		if len(out) != len(want) {
			t.Errorf("upgrade=%v: got %v, want %v", upgrade, out, want)
		}
		for k, v := range want {
			if out.Get(k) != v[0] {
				t.Errorf("upgrade=%v: %s = %q, want %q", upgrade, k, out.Get(k), v[0])
			}
		}
	}
	if in.Get("Authorization") == "" {
		t.Error("sanitize changed its input")
	}
}

func TestInnerURL(t *testing.T) {
	for path, want := range map[string]string{
		prefix + "/namespaces/ws/clusters/c1/proxy":                           "/",
		prefix + "/namespaces/ws/clusters/c1/proxy/":                          "/",
		prefix + "/namespaces/ws/clusters/c1/proxy/api/v1/namespaces/a%2Fb/x": "/api/v1/namespaces/a%2Fb/x",
	} {
		r := httptest.NewRequest(http.MethodGet, path, nil)
		u, err := innerURL(r, "ws", "c1")
		if err != nil {
			t.Fatal(err)
		}
		if u.EscapedPath() != want {
			t.Errorf("%s: %s, want %s", path, u.EscapedPath(), want)
		}
	}
	if _, err := innerURL(httptest.NewRequest(http.MethodGet, prefix+"/namespaces/ws/clusters/c1/proxyx", nil), "ws", "c1"); err == nil {
		t.Error("a path not under proxy/ was read as one")
	}
}
