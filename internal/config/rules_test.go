package config

import (
	"bytes"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

func compileDocumentSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	s, err := DocumentSchema()
	if err != nil {
		t.Fatal(err)
	}
	return compileSchema(t, s)
}

func compileSchema(t *testing.T, s map[string]any) *jsonschema.Schema {
	t.Helper()
	s["$schema"] = "http://json-schema.org/draft-07/schema#"
	data, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("file:///config.schema.json", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("file:///config.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return sch
}

func yamlInstance(t *testing.T, document string) any {
	t.Helper()
	j, err := yaml.YAMLToJSON([]byte(document))
	if err != nil {
		t.Fatalf("%s: %v", document, err)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(j))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestRules_RefuseTheirBadValuesAndKeepTheGood: every rule refuses its bad
// documents in Parse with an error naming its field, and, when JSON schema
// can say it, in the document schema too; its good documents pass both.
// The chart test (cmd/fleet) gives the same documents to helm.
func TestRules_RefuseTheirBadValuesAndKeepTheGood(t *testing.T) {
	sch := compileDocumentSchema(t)
	for _, r := range Rules {
		if len(r.Bad) == 0 {
			t.Errorf("rule of %s has no bad value to test it with", r.Field)
		}
		if (r.Schema == nil) == (r.CrossField == "") {
			t.Errorf("rule of %s: give a Schema or say why JSON schema cannot hold it (CrossField), not both", r.Field)
		}
		for _, bad := range r.Bad {
			_, err := Parse([]byte(bad))
			if err == nil || !strings.Contains(err.Error(), r.Field) {
				t.Errorf("rule of %s: Parse(%s) = %v, want an error naming the field", r.Field, bad, err)
			}
			if r.Schema != nil {
				if err := sch.Validate(yamlInstance(t, bad)); err == nil {
					t.Errorf("rule of %s: the document schema accepts %s", r.Field, bad)
				}
			}
		}
		for _, good := range r.Good {
			if _, err := Parse([]byte(good)); err != nil {
				t.Errorf("rule of %s: Parse(%s): %v", r.Field, good, err)
			}
			if err := sch.Validate(yamlInstance(t, good)); err != nil {
				t.Errorf("rule of %s: the document schema refuses %s: %v", r.Field, good, err)
			}
		}
	}
}

// TestDocumentSchema_AcceptsTheShippedConfigs: the example and test
// configurations are valid, so the schema must take them.
func TestDocumentSchema_AcceptsTheShippedConfigs(t *testing.T) {
	sch := compileDocumentSchema(t)
	for _, f := range []string{"../../renderer/testdata/config.yaml"} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Parse(data); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if err := sch.Validate(yamlInstance(t, string(data))); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	full := `{apiServerURL: "https://x:6443", apiServerCA: "LS0t", agentTLSMode: strict, agentCheckinInterval: 45s,
agentImage: "r/fleet:1", agentImagePullPolicy: Never, systemDefaultRegistry: reg.example.com, agentImagePullSecrets: [a],
agentReplicas: 2, agentLeaderElection: {leaseDuration: 30s, renewDeadline: 25s, retryPeriod: 10s},
agentProxy: {httpProxy: "http://p:3128", httpsProxy: "http://p:3128", noProxy: "10.0.0.0/8"}, manageAgent: false,
registrationTokenTTLRequired: true, importTokenTTL: 1h, requestCredentialTTL: 1h, offlineAfterMissedHeartbeats: 5,
agentRollout: {canary: {count: 1}, maxUnavailable: "10%", progressDeadline: 5m, autoRollback: true},
bootstrap: {enabled: true, namespace: fleet-local, agentNamespace: cattle-fleet-system},
insecureKubeconfig: {exec: true, tls: true, files: true, proxy: true}, kubeConfigSecretNamespaces: {"*": [kc]},
allowInsecureAPIServerURL: true, allowGitInsecureSkipTLSVerify: true, ignoreClusterRegistrationLabels: true, capiNamespaces: ["*"], capiClusterSelector: "a=b",
agentLabelKeys: [env], bundleMaxSize: 32Mi, bundleMaxResourceSize: 16Mi, bundleRenderTimeout: 30s,
bundleRenderMemoryLimit: 256Mi, bundleRenderConcurrency: 2}`
	if _, err := Parse([]byte(full)); err != nil {
		t.Fatal(err)
	}
	if err := sch.Validate(yamlInstance(t, full)); err != nil {
		t.Errorf("every field set: %v", err)
	}
	if err := sch.Validate(yamlInstance(t, `{agentTLSMod: strict}`)); err == nil {
		t.Error("the document schema accepts an unknown field")
	}
}

// The patterns the schema holds approximate Go's parsers; on these samples
// they must agree exactly.
func TestSchemaPatterns_AgreeWithGo(t *testing.T) {
	check := func(name, pattern string, goOK func(string) bool, samples []string) {
		re := regexp.MustCompile(pattern)
		for _, s := range samples {
			if got, want := re.MatchString(s), goOK(s); got != want {
				t.Errorf("%s %q: pattern says %v, Go says %v", name, s, got, want)
			}
		}
	}
	check("duration", durationPattern, func(s string) bool { _, err := time.ParseDuration(s); return err == nil },
		[]string{"0", "1s", "-1s", "+2m", "1h30m", "1.5h", ".5s", "1.s", "300ms", "2us", "2µs", "1d", "", "s", "1", "10 s", "1h-1m", "1e3s"})
	check("non-negative duration", nonNegativeDurationPattern, func(s string) bool { d, err := time.ParseDuration(s); return err == nil && d >= 0 },
		[]string{"0", "1s", "-1s", "+2m", "1h30m", "1d", "", "-0.5h"})
	// (Go reads a bare suffix, "Mi", as zero; the pattern refuses it.)
	check("quantity", quantityPattern, func(s string) bool { _, err := resource.ParseQuantity(s); return err == nil },
		[]string{"0", "32Mi", "512Ki", "1.5Gi", "100m", "1e3", "1E-3", "-1Mi", "+1", "32MB", "1 Mi", "", "0.5", ".5", "1k", "1K"})
	check("positive quantity", positiveQuantityPattern, func(s string) bool { q, err := resource.ParseQuantity(s); return err == nil && q.Sign() > 0 },
		[]string{"0", "00", "0.0Mi", "0.01", "1Mi", "-1Mi", "10", "0.5Gi", "000.0001"})
	check("label selector", labelSelectorPattern, func(s string) bool { _, err := labels.Parse(s); return err == nil },
		[]string{"", "a=b", "a==b", "a!=b", "a", "!a", "a,b", "a=b,c!=d", "env in (prod)", "env in (prod, dev)", "env notin (a,b)",
			"example.com/env=x", "a>5", "a<5", "a=(b", "env in prod", "a=b c", "a=", "a=-b", "Bad Key=x", "a/b/c=d", "a in ()"})
	check("agentLabelKeys entry", labelKeyOrPrefixPattern, func(s string) bool { return validateLabelKeyPattern(s) == nil },
		[]string{"env", "example.com/region", "example.com/*", "team-*", "*", "a/b/*", "Bad Key", "-team*", "ex*ample/*", "x/y/z", "example.*", "e*", "Env_1"})
	check("namespace", namespacePattern, func(s string) bool { return len(validation.IsDNS1123Label(s)) == 0 },
		[]string{"a", "fleet-local", "a-", "-a", "A", "a_b", "a.b", "", strings.Repeat("a", 63), strings.Repeat("a", 64), "1abc"})
	check("apiServerURL", apiServerURLPattern, func(s string) bool {
		return (&Config{AllowInsecureAPIServerURL: true}).CheckAPIServerURLScheme(s) == nil
	}, []string{"", "https://a", "http://a:80/x", "https://a.example.com:6443/k8s?x=1", "a:6443", "https://", "ftp://a", "https:///x", "//a"})
}
