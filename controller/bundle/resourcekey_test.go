package bundle

import (
	"fmt"
	"strings"
	"testing"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
)

func TestResourceKeys(t *testing.T) {
	manifests := []byte(`---
# Source: chart/templates/cm.yaml
apiVersion: v1
kind: ConfigMap
metadata: {name: a, namespace: somewhere}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: r}
---
not: an object
---
: broken
`)
	got := resourceKeys(manifests, fleet.BundleDeploymentOptions{TargetNamespace: "forced"})
	want := "[{ConfigMap v1 forced a} {ClusterRole rbac.authorization.k8s.io/v1  r}]"
	if fmt.Sprint(got) != want {
		t.Errorf("keys %v, want %s", got, want)
	}
	var many strings.Builder
	for i := range maxResourceKeys + 5 {
		fmt.Fprintf(&many, "---\n{apiVersion: v1, kind: ConfigMap, metadata: {name: c%d}}\n", i)
	}
	if n := len(resourceKeys([]byte(many.String()), fleet.BundleDeploymentOptions{})); n != maxResourceKeys {
		t.Errorf("%d keys, want at most %d", n, maxResourceKeys)
	}
	rd := []*render{{keys: got}, {keys: append(got[:1:1], fleet.ResourceKey{Kind: "ConfigMap", APIVersion: "v1", Namespace: "forced", Name: "b"})}}
	if all := fmt.Sprint(bundleResourceKey(rd)); all != "[{ClusterRole rbac.authorization.k8s.io/v1  r} {ConfigMap v1 forced a} {ConfigMap v1 forced b}]" {
		t.Errorf("bundle resourceKey %s", all)
	}
}
