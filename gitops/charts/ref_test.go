package charts_test

import (
	"strings"
	"testing"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/gitops/charts"
)

// TestParseRef: every way a fleet.yaml names a remote chart reads as one
// reference, as Fleet's `fleet apply` reads it.
func TestParseRef(t *testing.T) {
	for _, c := range []struct {
		helm fleet.HelmOptions
		want charts.Ref
	}{
		{fleet.HelmOptions{Repo: "https://charts.example/stable", Chart: "app", Version: "^1.0"},
			charts.Ref{Kind: charts.Repository, Location: "https://charts.example/stable", Name: "app", Version: "^1.0"}},
		{fleet.HelmOptions{Repo: "oci://ghcr.io/org/charts/app", Version: "1.2.3"},
			charts.Ref{Kind: charts.OCI, Location: "ghcr.io/org/charts/app", Version: "1.2.3"}},
		{fleet.HelmOptions{Repo: "oci://ghcr.io/org/charts/app", Chart: "app"},
			charts.Ref{Kind: charts.OCI, Location: "ghcr.io/org/charts/app"}},
		{fleet.HelmOptions{Repo: "oci://ghcr.io/org/charts/", Chart: "app", Version: "~1"},
			charts.Ref{Kind: charts.OCI, Location: "ghcr.io/org/charts/app", Version: "~1"}},
		{fleet.HelmOptions{Chart: "oci://registry.example:5000/app:0.1.0"},
			charts.Ref{Kind: charts.OCI, Location: "registry.example:5000/app", Version: "0.1.0"}},
		{fleet.HelmOptions{Chart: "https://charts.example/app-1.0.0.tgz", Version: "1.0.0"},
			charts.Ref{Kind: charts.URL, Location: "https://charts.example/app-1.0.0.tgz"}},
	} {
		got, err := charts.ParseRef(c.helm)
		if err != nil {
			t.Errorf("%+v: %v", c.helm, err)
			continue
		}
		if got.Kind != c.want.Kind || got.Location != c.want.Location || got.Name != c.want.Name || got.Version != c.want.Version {
			t.Errorf("%+v: got %+v, want %+v", c.helm, got, c.want)
		}
	}
}

// TestParseRef_Errors: what cannot be fetched says which field and why.
func TestParseRef_Errors(t *testing.T) {
	for _, c := range []struct {
		helm fleet.HelmOptions
		want string
	}{
		{fleet.HelmOptions{Repo: "https://charts.example"}, `helm.repo "https://charts.example" names a chart repository: helm.chart must name the chart in it`},
		{fleet.HelmOptions{Repo: "https://charts.example", Chart: "charts/app"}, "must be the chart's name in the repository"},
		{fleet.HelmOptions{Repo: "ftp://charts.example", Chart: "app"}, "want an https://, http:// or oci:// URL"},
		{fleet.HelmOptions{Chart: "git::https://github.com/org/repo//chart"}, "charts are fetched from https://, http:// and oci:// URLs only"},
		{fleet.HelmOptions{Chart: "./chart"}, "is a directory of the Bundle"},
		{fleet.HelmOptions{Chart: "oci://registry.example/app:1.0.0", Version: "2.0.0"}, `has tag "1.0.0" but helm.version is "2.0.0"`},
		{fleet.HelmOptions{Chart: "oci://registry.example"}, "oci://<registry>/<path>/<chart>"},
		{fleet.HelmOptions{Repo: "https://bot:s3cret@charts.example"}, `helm.repo "https://xxxxx@charts.example"`},
		{fleet.HelmOptions{Repo: "https://charts.example", Chart: "app", Version: "^^1"}, `helm.version "^^1" is neither a version nor a semver range`},
	} {
		_, err := charts.ParseRef(c.helm)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err = %v, want %q", c.helm, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("the error shows a password: %v", err)
		}
	}
}

// TestAuthFromSecretData: Fleet's keys; a half-set credential, a CA that is
// no certificate, and TLS verification off without the configuration's
// leave are refused naming the key, never showing a value.
func TestAuthFromSecretData(t *testing.T) {
	s := newServer(t, true)
	a, err := charts.AuthFromSecretData(map[string][]byte{"username": []byte("bot"), "password": []byte("s3cret"), "cacerts": s.caPEM(), "basicHTTP": []byte("true")}, false)
	if err != nil || a.Username != "bot" || a.Password != "s3cret" || len(a.CABundle) == 0 || !a.PlainHTTP || a.InsecureSkipTLSVerify {
		t.Errorf("auth %+v, err %v", a, err)
	}
	if a, err := charts.AuthFromSecretData(map[string][]byte{"insecureSkipVerify": []byte("true")}, true); err != nil || !a.InsecureSkipTLSVerify {
		t.Errorf("allowed insecure: %+v, %v", a, err)
	}
	for _, c := range []struct {
		data map[string][]byte
		want string
	}{
		{map[string][]byte{"username": []byte("s3cret")}, "username and password but not the other"},
		{map[string][]byte{"password": []byte("s3cret")}, "username and password but not the other"},
		{map[string][]byte{"cacerts": []byte("s3cret")}, "key cacerts holds no PEM certificate"},
		{map[string][]byte{"caBundle": []byte("s3cret")}, "key caBundle holds no PEM certificate"},
		{map[string][]byte{"insecureSkipVerify": []byte("true")}, "sets insecureSkipVerify, which the source component is not configured to allow"},
		{map[string][]byte{"insecureSkipVerify": []byte("s3cret")}, "insecureSkipVerify is not true or false"},
	} {
		_, err := charts.AuthFromSecretData(c.data, false)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%v: err = %v, want %q", keys(c.data), err, c.want)
		}
	}
}
