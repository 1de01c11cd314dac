package proxy

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

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
