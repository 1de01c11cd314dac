package config

import (
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Rule is one rule of the configuration document. Validate checks every
// rule, and the JSON schema of the document (DocumentSchema), from which
// charts/fleet's values.schema.json is generated, says what JSON schema can
// say of it: so a rule added here reaches the controller, `fleet render
// agent --config` and `helm install` at once.
type Rule struct {
	// Field is the path of the value the rule is about in the document,
	// such as "agentLeaderElection.leaseDuration".
	Field string
	// Schema is what JSON schema (draft-07) says of the value at Field; it
	// is merged over the schema of the field's type. Nil when CrossField
	// says why JSON schema cannot say it.
	Schema map[string]any
	// CrossField, when set, says why JSON schema cannot hold the rule (it
	// depends on another field, or on arithmetic): the chart checks it in
	// templates/validate.yaml instead.
	CrossField string
	// Bad are documents (YAML) the rule refuses, and Good documents it
	// accepts (edge cases): the tests hold the schema, Validate and the
	// chart to them.
	Bad, Good []string

	check func(c *Config) []error
}

// Patterns of the schema; each is RE2 and ECMA 262 alike (Helm's schema
// validators use Go's regexp).
const (
	// dns1123Label is a namespace name (validation.IsDNS1123Label).
	dns1123Label     = `[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?`
	namespacePattern = `^` + dns1123Label + `$`
	// durationPattern is a Go duration (time.ParseDuration), and
	// nonNegativeDurationPattern one that is not negative.
	durationPattern            = `^([-+]?0|[-+]?(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$`
	nonNegativeDurationPattern = `^(\+?0|\+?(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$`
	// quantityPattern is a Kubernetes quantity (resource.ParseQuantity),
	// positiveQuantityPattern one above zero.
	quantitySuffix          = `(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][-+]?[0-9]+)?`
	quantityPattern         = `^[-+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)` + quantitySuffix + `$`
	positiveQuantityPattern = `^\+?(0*[1-9][0-9]*(\.[0-9]*)?|0*\.[0-9]*[1-9][0-9]*)` + quantitySuffix + `$`

	dnsSubdomain = `[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*`
	labelName    = `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`
	labelKey     = `(` + dnsSubdomain + `/)?` + labelName
	labelValue   = `(` + labelName + `)?`
	// labelKeyPattern is a label key (validation.IsQualifiedName, but for
	// the lengths of its parts).
	labelKeyPattern = `^` + labelKey + `$`
	// labelKeyOrPrefixPattern is an agentLabelKeys entry: a key, or the
	// start of one followed by "*".
	labelKeyOrPrefixPattern = `^(` + labelKey + `|(` + dnsSubdomain + `/)?[A-Za-z0-9][-A-Za-z0-9_.]*\*|` + dnsSubdomain + `/\*)$`
	// labelSelectorPattern is the string form of a label selector
	// (labels.Parse).
	labelRequirement = `(!\s*` + labelKey + `|` + labelKey + `(\s*(=|==|!=)\s*` + labelValue +
		`|\s+(in|notin)\s*\(\s*` + labelValue + `(\s*,\s*` + labelValue + `)*\s*\)|\s*(<|>)\s*[0-9]+)?)`
	labelSelectorPattern = `^\s*(` + labelRequirement + `(\s*,\s*` + labelRequirement + `)*)?\s*$`
	// apiServerURLPattern is an absolute http(s) URL with a host, or
	// nothing.
	apiServerURLPattern = `^(https?://[^/?#\s]+([/?#]\S*)?)?$`
)

// nonNegativeDuration is the rule of every duration field.
func nonNegativeDuration(field string, get func(c *Config) time.Duration) Rule {
	return Rule{
		Field:  field,
		Schema: map[string]any{"type": "string", "pattern": nonNegativeDurationPattern},
		Bad:    []string{doc(field, "-1s"), doc(field, "1d"), doc(field, "soon")},
		Good:   []string{doc(field, "1h30m"), doc(field, `"0s"`)},
		check: func(c *Config) []error {
			if get(c) < 0 {
				return []error{fmt.Errorf("%s must not be negative", field)}
			}
			return nil
		},
	}
}

// positiveQuantity is the rule of every size field.
func positiveQuantity(field string, get func(c *Config) *resource.Quantity) Rule {
	return Rule{
		Field:  field,
		Schema: map[string]any{"type": []any{"string", "integer"}, "pattern": positiveQuantityPattern, "minimum": 1},
		Bad:    []string{doc(field, "0"), doc(field, `"-1Mi"`), doc(field, "32MB")},
		Good:   []string{doc(field, "1Gi"), doc(field, "100000000")},
		check: func(c *Config) []error {
			if q := get(c); q != nil && q.Sign() <= 0 {
				return []error{fmt.Errorf("%s %s must be positive", field, q)}
			}
			return nil
		},
	}
}

// namespaceName is the rule of a namespace name field ("" is the default).
func namespaceName(field string, get func(c *Config) string) Rule {
	return Rule{
		Field:  field,
		Schema: map[string]any{"type": "string", "pattern": `^(` + dns1123Label + `)?$`},
		Bad:    []string{doc(field, "Fleet_Local"), doc(field, "a/b")},
		Good:   []string{doc(field, "fleet-local-2")},
		check: func(c *Config) []error {
			ns := get(c)
			if ns == "" {
				return nil
			}
			if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
				return []error{fmt.Errorf("%s %q is not a namespace name: %s", field, ns, strings.Join(msgs, "; "))}
			}
			return nil
		},
	}
}

// doc is the document that sets field (a dotted path) to the YAML value.
func doc(field, value string) string {
	parts := strings.Split(field, ".")
	out := value
	for i := len(parts) - 1; i >= 0; i-- {
		out = "{" + parts[i] + ": " + out + "}"
	}
	return out
}

// Rules are the rules of the configuration document, in the order Validate
// reports them.
var Rules = []Rule{
	{
		Field:  "apiServerURL",
		Schema: map[string]any{"type": "string", "pattern": apiServerURLPattern},
		Bad:    []string{doc("apiServerURL", "fleet.example.com:6443"), doc("apiServerURL", "https://")},
		Good:   []string{doc("apiServerURL", "https://fleet.example.com:6443/k8s")},
		check: func(c *Config) []error {
			var insecure *InsecureAPIServerURLError
			if err := c.CheckAPIServerURLScheme(c.APIServerURL); err != nil && !errors.As(err, &insecure) {
				return []error{err}
			}
			return nil
		},
	},
	{
		Field:      "apiServerURL",
		CrossField: "an http:// URL needs allowInsecureAPIServerURL",
		Bad:        []string{doc("apiServerURL", "http://fleet.example.com")},
		Good:       []string{`{apiServerURL: "http://fleet.example.com", allowInsecureAPIServerURL: true}`},
		check: func(c *Config) []error {
			var insecure *InsecureAPIServerURLError
			if err := c.CheckAPIServerURLScheme(c.APIServerURL); errors.As(err, &insecure) {
				return []error{err}
			}
			return nil
		},
	},
	{
		Field: "kubeConfigSecretNamespaces",
		Schema: map[string]any{
			"patternProperties": map[string]any{`^(\*|` + dns1123Label + `)$`: map[string]any{
				"type": "array", "items": map[string]any{"type": "string", "pattern": namespacePattern},
			}},
			"additionalProperties": false,
		},
		Bad:  []string{`{kubeConfigSecretNamespaces: {team-a: [Not_A_Namespace]}}`, `{kubeConfigSecretNamespaces: {Team_A: [shared]}}`},
		Good: []string{`{kubeConfigSecretNamespaces: {"*": [shared], team-a: [kc-1]}}`},
		check: func(c *Config) []error {
			var errs []error
			for ws, nss := range c.KubeConfigSecretNamespaces {
				if ws != AllWorkspaces {
					if msgs := validation.IsDNS1123Label(ws); len(msgs) > 0 {
						errs = append(errs, fmt.Errorf("kubeConfigSecretNamespaces: key %q is not a namespace name (or %q for every workspace): %s", ws, AllWorkspaces, strings.Join(msgs, "; ")))
					}
				}
				for _, ns := range nss {
					if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
						errs = append(errs, fmt.Errorf("kubeConfigSecretNamespaces[%q]: %q is not a namespace name: %s", ws, ns, strings.Join(msgs, "; ")))
					}
				}
			}
			return errs
		},
	},
	namespaceName("bootstrap.namespace", func(c *Config) string { return c.Bootstrap.Namespace }),
	namespaceName("bootstrap.agentNamespace", func(c *Config) string { return c.Bootstrap.AgentNamespace }),
	{
		Field:  "agentTLSMode",
		Schema: map[string]any{"enum": []any{"", TLSModeSystemStore, TLSModeStrict}},
		Bad:    []string{doc("agentTLSMode", "strikt")},
		check: func(c *Config) []error {
			switch c.AgentTLSMode {
			case "", TLSModeSystemStore, TLSModeStrict:
				return nil
			}
			return []error{fmt.Errorf("agentTLSMode %q must be %q or %q", c.AgentTLSMode, TLSModeSystemStore, TLSModeStrict)}
		},
	},
	{
		Field:  "agentImagePullPolicy",
		Schema: map[string]any{"enum": []any{"", string(corev1.PullAlways), string(corev1.PullIfNotPresent), string(corev1.PullNever)}},
		Bad:    []string{doc("agentImagePullPolicy", "Sometimes")},
		check: func(c *Config) []error {
			switch c.AgentImagePullPolicy {
			case "", corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
				return nil
			}
			return []error{fmt.Errorf("agentImagePullPolicy %q must be Always, IfNotPresent or Never", c.AgentImagePullPolicy)}
		},
	},
	nonNegativeDuration("agentCheckinInterval", func(c *Config) time.Duration { return c.AgentCheckinInterval.Duration }),
	nonNegativeDuration("importTokenTTL", func(c *Config) time.Duration { return c.ImportTokenTTL.Duration }),
	nonNegativeDuration("requestCredentialTTL", func(c *Config) time.Duration { return c.RequestCredentialTTL.Duration }),
	nonNegativeDuration("agentLeaderElection.leaseDuration", func(c *Config) time.Duration { return c.AgentLeaderElection.LeaseDuration.Duration }),
	nonNegativeDuration("agentLeaderElection.renewDeadline", func(c *Config) time.Duration { return c.AgentLeaderElection.RenewDeadline.Duration }),
	nonNegativeDuration("agentLeaderElection.retryPeriod", func(c *Config) time.Duration { return c.AgentLeaderElection.RetryPeriod.Duration }),
	{
		Field:      "requestCredentialTTL",
		CrossField: "a minimum duration is arithmetic",
		Bad:        []string{doc("requestCredentialTTL", "1m"), doc("requestCredentialTTL", "9m59s"), doc("requestCredentialTTL", "0.1h")},
		Good:       []string{doc("requestCredentialTTL", "10m"), doc("requestCredentialTTL", "0.5h"), doc("requestCredentialTTL", "9m60s"), doc("requestCredentialTTL", "599999ms1ms")},
		check: func(c *Config) []error {
			if d := c.RequestCredentialTTL.Duration; d != 0 && d < minRequestCredentialTTL {
				return []error{fmt.Errorf("requestCredentialTTL %s is below the 10m minimum of the TokenRequest API", d)}
			}
			return nil
		},
	},
	{
		Field:  "agentReplicas",
		Schema: map[string]any{"minimum": 0},
		Bad:    []string{doc("agentReplicas", "-1")},
		check: func(c *Config) []error {
			if c.AgentReplicas != nil && *c.AgentReplicas < 0 {
				return []error{errors.New("agentReplicas must not be negative")}
			}
			return nil
		},
	},
	{
		Field:  "offlineAfterMissedHeartbeats",
		Schema: map[string]any{"minimum": 0},
		Bad:    []string{doc("offlineAfterMissedHeartbeats", "-1")},
		check: func(c *Config) []error {
			if c.OfflineAfterMissedHeartbeats < 0 {
				return []error{errors.New("offlineAfterMissedHeartbeats must not be negative")}
			}
			return nil
		},
	},
	{
		Field:  "capiNamespaces",
		Schema: map[string]any{"items": map[string]any{"pattern": `^(\*|` + dns1123Label + `)$`}},
		Bad:    []string{doc("capiNamespaces", "[Not_A_Namespace]")},
		Good:   []string{doc("capiNamespaces", `["*", capi-system]`)},
		check: func(c *Config) []error {
			var errs []error
			for _, ns := range c.CAPINamespaces {
				if ns == CAPIAllNamespaces {
					continue
				}
				if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
					errs = append(errs, fmt.Errorf("capiNamespaces: %q is not a namespace name (or %q for all): %s", ns, CAPIAllNamespaces, strings.Join(msgs, "; ")))
				}
			}
			return errs
		},
	},
	{
		Field:  "capiClusterSelector",
		Schema: map[string]any{"pattern": labelSelectorPattern},
		Bad:    []string{doc("capiClusterSelector", `"a=(b"`), doc("capiClusterSelector", `"env in prod"`)},
		Good:   []string{doc("capiClusterSelector", `"fleet=enabled,env in (prod, dev),!legacy,tier!=x"`)},
		check: func(c *Config) []error {
			if _, err := labels.Parse(c.CAPIClusterSelector); err != nil {
				return []error{fmt.Errorf("capiClusterSelector %q is not a label selector such as \"fleet=enabled\": %w", c.CAPIClusterSelector, err)}
			}
			return nil
		},
	},
	{
		Field:  "agentLabelKeys",
		Schema: map[string]any{"items": map[string]any{"pattern": labelKeyOrPrefixPattern}},
		Bad:    []string{doc("agentLabelKeys", `["*"]`), doc("agentLabelKeys", `["a/b/*"]`), doc("agentLabelKeys", `["Bad Key!"]`), doc("agentLabelKeys", `["-team*"]`)},
		Good:   []string{doc("agentLabelKeys", `[env, "example.com/*", "team-*", "example.com/region"]`)},
		check: func(c *Config) []error {
			var errs []error
			for _, k := range c.AgentLabelKeys {
				if err := validateLabelKeyPattern(k); err != nil {
					errs = append(errs, fmt.Errorf("agentLabelKeys: %w", err))
				}
			}
			return errs
		},
	},
	positiveQuantity("bundleMaxSize", func(c *Config) *resource.Quantity { return c.BundleMaxSize }),
	positiveQuantity("bundleMaxResourceSize", func(c *Config) *resource.Quantity { return c.BundleMaxResourceSize }),
	positiveQuantity("bundleRenderMemoryLimit", func(c *Config) *resource.Quantity { return c.BundleRenderMemoryLimit }),
	{
		Field:      "bundleRenderMemoryLimit",
		CrossField: "a minimum size is arithmetic",
		Bad:        []string{doc("bundleRenderMemoryLimit", "16Mi"), doc("bundleRenderMemoryLimit", "67108863"), doc("bundleRenderMemoryLimit", "6.7e7")},
		Good:       []string{doc("bundleRenderMemoryLimit", "64Mi"), doc("bundleRenderMemoryLimit", "0.5Gi"), doc("bundleRenderMemoryLimit", "1e9"), doc("bundleRenderMemoryLimit", "70M")},
		check: func(c *Config) []error {
			if q := c.BundleRenderMemoryLimit; q != nil && q.Sign() > 0 && q.Value() < minBundleRenderMemoryLimit {
				return []error{fmt.Errorf("bundleRenderMemoryLimit %s is below the 64Mi minimum a render worker needs to start", q)}
			}
			return nil
		},
	},
	nonNegativeDuration("bundleRenderTimeout", func(c *Config) time.Duration { return c.BundleRenderTimeout.Duration }),
	{
		Field:  "bundleRenderConcurrency",
		Schema: map[string]any{"minimum": 0, "maximum": maxBundleRenderConcurrency},
		Bad:    []string{doc("bundleRenderConcurrency", "-1"), doc("bundleRenderConcurrency", "100")},
		Good:   []string{doc("bundleRenderConcurrency", "64")},
		check: func(c *Config) []error {
			if n := c.BundleRenderConcurrency; n < 0 || n > maxBundleRenderConcurrency {
				return []error{fmt.Errorf("bundleRenderConcurrency %d must be between 1 and %d (0: the default, %d)", n, maxBundleRenderConcurrency, DefaultBundleRenderConcurrency)}
			}
			return nil
		},
	},
	{
		Field: "agentRollout.maxUnavailable",
		Schema: map[string]any{"oneOf": []any{
			map[string]any{"type": "integer", "minimum": 1},
			map[string]any{"type": "string", "pattern": `^0*([1-9][0-9]?|100)%$`},
		}},
		Bad:  []string{doc("agentRollout.maxUnavailable", "0"), doc("agentRollout.maxUnavailable", `"0%"`), doc("agentRollout.maxUnavailable", `"150%"`), doc("agentRollout.maxUnavailable", `"5"`)},
		Good: []string{doc("agentRollout.maxUnavailable", "3"), doc("agentRollout.maxUnavailable", `"100%"`)},
		check: func(c *Config) []error {
			if s := c.AgentRollout; s != nil && s.MaxUnavailable != nil {
				if _, err := RolloutWaveSize(s, 100); err != nil {
					return []error{err}
				}
			}
			return nil
		},
	},
	nonNegativeDuration("agentRollout.progressDeadline", func(c *Config) time.Duration {
		if c.AgentRollout == nil || c.AgentRollout.ProgressDeadline == nil {
			return 0
		}
		return c.AgentRollout.ProgressDeadline.Duration
	}),
	{
		Field:  "agentRollout.canary.count",
		Schema: map[string]any{"minimum": 0},
		Bad:    []string{doc("agentRollout.canary.count", "-1")},
		check: func(c *Config) []error {
			if s := c.AgentRollout; s != nil && s.Canary != nil && s.Canary.Count < 0 {
				return []error{errors.New("agentRollout.canary.count must not be negative")}
			}
			return nil
		},
	},
	{
		Field: "agentRollout.canary",
		// A canary picks Clusters by count or by selector.
		Schema: map[string]any{"anyOf": []any{
			map[string]any{"required": []any{"selector"}},
			map[string]any{"required": []any{"count"}, "properties": map[string]any{"count": map[string]any{"minimum": 1}}},
		}},
		Bad:  []string{doc("agentRollout.canary", "{}"), doc("agentRollout.canary", "{count: 0}")},
		Good: []string{doc("agentRollout.canary", "{count: 1}")},
		check: func(c *Config) []error {
			if s := c.AgentRollout; s != nil && s.Canary != nil && s.Canary.Selector == nil && s.Canary.Count == 0 {
				return []error{errors.New("agentRollout.canary picks no Cluster: give a count or a selector")}
			}
			return nil
		},
	},
	{
		Field: "agentRollout.canary.selector",
		Schema: map[string]any{"properties": map[string]any{
			"matchLabels": map[string]any{
				"patternProperties":    map[string]any{labelKeyPattern: map[string]any{"type": "string", "pattern": `^` + labelValue + `$`, "maxLength": 63}},
				"additionalProperties": false,
			},
			"matchExpressions": map[string]any{"items": map[string]any{
				"required": []any{"key", "operator"},
				"properties": map[string]any{
					"key":      map[string]any{"pattern": labelKeyPattern},
					"operator": map[string]any{"enum": []any{"In", "NotIn", "Exists", "DoesNotExist"}},
					"values":   map[string]any{"items": map[string]any{"pattern": `^` + labelValue + `$`, "maxLength": 63}},
				},
				// In and NotIn need values, Exists and DoesNotExist have none.
				"if":   map[string]any{"properties": map[string]any{"operator": map[string]any{"enum": []any{"In", "NotIn"}}}},
				"then": map[string]any{"required": []any{"values"}, "properties": map[string]any{"values": map[string]any{"minItems": 1}}},
				"else": map[string]any{"properties": map[string]any{"values": map[string]any{"maxItems": 0}}},
			}},
		}},
		// ignoreClusterRegistrationLabels: a key agents cannot set, so only
		// this rule refuses them.
		Bad: []string{
			`{ignoreClusterRegistrationLabels: true, agentRollout: {canary: {selector: {matchExpressions: [{key: ring, operator: Maybe}]}}}}`,
			`{ignoreClusterRegistrationLabels: true, agentRollout: {canary: {selector: {matchExpressions: [{key: ring, operator: In}]}}}}`,
			`{ignoreClusterRegistrationLabels: true, agentRollout: {canary: {selector: {matchLabels: {"Bad Key": "x"}}}}}`,
		},
		Good: []string{`{ignoreClusterRegistrationLabels: true, agentRollout: {canary: {selector: {matchExpressions: [{key: ring, operator: In, values: ["0"]}, {key: legacy, operator: DoesNotExist}]}}}}`},
		check: func(c *Config) []error {
			if s := c.AgentRollout; s != nil && s.Canary != nil && s.Canary.Selector != nil {
				if _, err := metav1.LabelSelectorAsSelector(s.Canary.Selector); err != nil {
					return []error{fmt.Errorf("agentRollout.canary.selector: %w", err)}
				}
			}
			return nil
		},
	},
	{
		Field:      "agentRollout.canary.selector",
		CrossField: "whether agents may set a key depends on agentLabelKeys and ignoreClusterRegistrationLabels",
		Bad: []string{
			`{agentRollout: {canary: {selector: {matchLabels: {canary: "true"}}}}}`,
			`{agentLabelKeys: ["example.com/*"], agentRollout: {canary: {selector: {matchExpressions: [{key: example.com/ring, operator: Exists}]}}}}`,
			`{agentLabelKeys: [env], agentRollout: {canary: {selector: {matchLabels: {fleet.cattle.io/created-by-agent-pod: x}}}}}`,
		},
		Good: []string{
			`{agentLabelKeys: [env], agentRollout: {canary: {selector: {matchLabels: {example.com/ring: canary}}}}}`,
			`{agentRollout: {canary: {selector: {matchLabels: {management.cattle.io/canary: "true"}}}}}`,
		},
		check: func(c *Config) []error {
			if s := c.AgentRollout; s != nil && s.Canary != nil && s.Canary.Selector != nil {
				return c.checkCanaryKeys(s.Canary.Selector)
			}
			return nil
		},
	},
}

// minRequestCredentialTTL is the TokenRequest API's minimum.
const minRequestCredentialTTL = 10 * time.Minute
