// Package check proves that the example PrometheusRule's expressions and
// durations are valid PromQL, as Prometheus itself parses them.
package check

import (
	"os"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"
)

type prometheusRule struct {
	Kind string `json:"kind"`
	Spec struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert string `json:"alert"`
				Expr  string `json:"expr"`
				For   string `json:"for"`
			} `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

func TestPrometheusRuleExpressionsParse(t *testing.T) {
	raw, err := os.ReadFile("../prometheusrule.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var pr prometheusRule
	if err := yaml.Unmarshal(raw, &pr); err != nil {
		t.Fatal(err)
	}
	if pr.Kind != "PrometheusRule" || len(pr.Spec.Groups) == 0 {
		t.Fatalf("not a PrometheusRule with groups: %+v", pr)
	}
	n := 0
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			n++
			if _, err := parser.NewParser(parser.Options{}).ParseExpr(r.Expr); err != nil {
				t.Errorf("alert %s: %v", r.Alert, err)
			}
			if r.For != "" {
				if _, err := model.ParseDuration(r.For); err != nil {
					t.Errorf("alert %s: for %q: %v", r.Alert, r.For, err)
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("no rules")
	}
}
