package names

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestClusterNamespace(t *testing.T) {
	cases := []struct{ ns, name, want string }{
		// Example from Fleet's documentation of the local cluster.
		{"fleet-local", "local", "cluster-fleet-local-local-1a3d67d0a899"},
	}
	for _, tc := range cases {
		if got := ClusterNamespace(tc.ns, tc.name); got != tc.want {
			t.Errorf("ClusterNamespace(%q, %q) = %q, want %q", tc.ns, tc.name, got, tc.want)
		}
	}
}

func TestClusterNamespace_LongNamesStayValidAndDistinct(t *testing.T) {
	long := strings.Repeat("a", 60)
	a := ClusterNamespace("fleet-default", long+"1")
	b := ClusterNamespace("fleet-default", long+"2")
	for _, n := range []string{a, b} {
		if len(n) > MaxNameLength {
			t.Errorf("%q is %d characters, want at most %d", n, len(n), MaxNameLength)
		}
	}
	if a == b {
		t.Errorf("distinct clusters share namespace %q", a)
	}
}

func TestSafeConcatName_NeverEndsWithADash(t *testing.T) {
	// Character 57 is '-': the cut must not leave it before the suffix.
	n := SafeConcatName(strings.Repeat("b", 56), strings.Repeat("c", 20))
	if len(n) > MaxNameLength || strings.Contains(n, "--") {
		t.Errorf("bad name %q", n)
	}
}

func TestCredentialSecret(t *testing.T) {
	n := CredentialSecret("client", "random")
	if len(n) != MaxNameLength || !strings.HasPrefix(n, "c-") {
		t.Errorf("CredentialSecret = %q, want c- and 63 characters", n)
	}
	if n == CredentialSecret("client", "random2") {
		t.Error("a new clientRandom must give a new secret name")
	}
}

func TestAutoClusterName(t *testing.T) {
	if got := AutoClusterName("abc"); got != "cluster-"+KeyHash("abc") || len(got) != len("cluster-")+12 {
		t.Errorf("AutoClusterName = %q", got)
	}
}

func TestNamespaceIsFor_OnlyTheClusterItWasMadeFor(t *testing.T) {
	ns := NewClusterNamespace("fleet-default", "prod")
	if !NamespaceIsFor(ns, "fleet-default", "prod") {
		t.Error("the namespace made for a Cluster is not recognised as its own")
	}
	for _, other := range [][2]string{{"fleet-default", "prod2"}, {"fleet", "default-prod"}, {"fleet-local", "prod"}} {
		if NamespaceIsFor(ns, other[0], other[1]) {
			t.Errorf("%s/%s may use the namespace of fleet-default/prod", other[0], other[1])
		}
	}
	if NamespaceIsFor(&corev1.Namespace{}, "fleet-default", "prod") {
		t.Error("a namespace without annotations (made by someone else) is taken for the Cluster's")
	}
}

func TestCredentialAccess_DistinctAcrossWorkspaceSplits(t *testing.T) {
	long := strings.Repeat("w", 63)
	pairs := [][2][2]string{
		{{"a-b", "c"}, {"a", "b-c"}},
		{{"fleet-default", "request-x"}, {"fleet", "default-request-x"}},
		{{long, "request-abcde"}, {long, "request-abcdf"}},
		{{long[:50] + "-x", "request-abcde"}, {long[:50], "x-request-abcde"}},
	}
	for _, p := range pairs {
		a, b := CredentialAccess(p[0][0], p[0][1]), CredentialAccess(p[1][0], p[1][1])
		if a == b {
			t.Errorf("%v and %v share the name %q", p[0], p[1], a)
		}
		for _, n := range []string{a, b} {
			if len(n) > MaxNameLength || strings.HasSuffix(n, "-") {
				t.Errorf("%q is not a valid name", n)
			}
		}
	}
	if got := CredentialAccess("fleet-default", "request-abcde"); !strings.HasPrefix(got, "creds-") || !strings.HasSuffix(got, "-fleet-default-request-abcde") {
		t.Errorf("CredentialAccess = %q, want creds-<hash>-<namespace>-<name>", got)
	}
}
