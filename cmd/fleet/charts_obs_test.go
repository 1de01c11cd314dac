package main

import (
	"fmt"
	"testing"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gitops-fleet/fleet/renderer"
)

func renderChart(t *testing.T, dir, release, values string) []*unstructured.Unstructured {
	t.Helper()
	ch, err := renderer.LoadChartDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out, err := renderer.Render(renderer.Input{Chart: ch, ReleaseName: release, Namespace: "cattle-fleet-system", Values: []byte(values)})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := out.Objects()
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// TestCharts_ArgsAreTheBinarysFlagsAndMetricsPortsAgree: every argument the
// charts give a component is a flag of its command (so a chart value such as
// logLevel reaches it), logLevel is passed to each, and each metrics address
// is port 8080, the container's port named metrics, which the metrics
// Service targets.
func TestCharts_ArgsAreTheBinarysFlagsAndMetricsPortsAgree(t *testing.T) {
	commands := map[string]func() *cobra.Command{
		"controller": newControllerCommand, "proxy": newProxyCommand, "renderer": newRendererCommand, "agent": newAgentCommand,
		"gitops": newGitopsCommand,
	}
	type container struct {
		deployment string
		c          corev1.Container
	}
	var containers []container
	services := map[string]corev1.Service{}
	collect := func(objs []*unstructured.Unstructured) {
		for _, o := range objs {
			switch o.GetKind() {
			case "Deployment":
				var d appsv1.Deployment
				if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &d); err != nil {
					t.Fatal(err)
				}
				for _, c := range d.Spec.Template.Spec.Containers {
					containers = append(containers, container{d.Name, c})
				}
			case "Service":
				var s corev1.Service
				if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &s); err != nil {
					t.Fatal(err)
				}
				services[s.Name] = s
			}
		}
	}
	collect(renderChart(t, "../../charts/fleet", "fleet", "apiServerURL: https://fleet.example.com:6443\nlogLevel: debug\nshards: 2\n"))
	collect(renderChart(t, "../../charts/fleet-agent", "fleet-agent", "apiServerURL: https://fleet.example.com:6443\ntokenName: t\ntoken: x\nlogLevel: debug\n"))

	seen := map[string]bool{}
	metricsDeployments := map[string]bool{}
	for _, ct := range containers {
		c := ct.c
		if len(c.Args) == 0 || commands[c.Args[0]] == nil {
			t.Errorf("Deployment %s container %s runs %v: not a fleet component", ct.deployment, c.Name, c.Args)
			continue
		}
		name := c.Args[0]
		seen[name] = true
		cmd := commands[name]()
		if err := cmd.ParseFlags(c.Args[1:]); err != nil {
			t.Errorf("Deployment %s: fleet %s refuses the chart's arguments %v: %v", ct.deployment, name, c.Args[1:], err)
			continue
		}
		level := cmd.Flags().Lookup("log-level").Value.String()
		for _, e := range c.Env {
			if e.Name == logLevelEnv && !cmd.Flags().Changed("log-level") {
				level = e.Value
			}
		}
		if level != "debug" {
			t.Errorf("Deployment %s: fleet %s runs with log level %q, want the chart's logLevel debug", ct.deployment, name, level)
		}
		f := cmd.Flags().Lookup("metrics-address")
		if f == nil {
			f = cmd.Flags().Lookup("metrics-bind-address") // fleet gitops: controller-runtime's name
		}
		if f != nil {
			addr := f.Value.String()
			if addr != ":8080" {
				t.Errorf("Deployment %s: metrics address %q, want :8080", ct.deployment, addr)
			}
			port := int32(0)
			for _, p := range c.Ports {
				if p.Name == "metrics" {
					port = p.ContainerPort
				}
			}
			if fmt.Sprintf(":%d", port) != addr {
				t.Errorf("Deployment %s: container port metrics is %d, the process listens on %s", ct.deployment, port, addr)
			}
			metricsDeployments[name] = true
		}
	}
	for name := range commands {
		if !seen[name] {
			t.Errorf("no chart runs fleet %s", name)
		}
	}
	for _, svc := range []string{"fleet-controller-metrics", "fleet-proxy-metrics", "fleet-gitops-metrics"} {
		s, ok := services[svc]
		if !ok {
			t.Errorf("no Service %s", svc)
			continue
		}
		if len(s.Spec.Ports) != 1 || s.Spec.Ports[0].Name != "metrics" || s.Spec.Ports[0].TargetPort.String() != "metrics" || s.Spec.Ports[0].Port != 8080 {
			t.Errorf("Service %s ports %+v, want metrics 8080 -> metrics", svc, s.Spec.Ports)
		}
	}
	if !metricsDeployments["controller"] || !metricsDeployments["proxy"] || !metricsDeployments["gitops"] {
		t.Errorf("metrics served by %v, want the controller, fleet-proxy and fleet-gitops", metricsDeployments)
	}
}

// TestFleetChart_ServiceMonitor: off by default (its CRD may not be
// installed); on, it scrapes the port named metrics of the three metrics
// Services, at the interval and with the labels given.
func TestFleetChart_ServiceMonitor(t *testing.T) {
	find := func(objs []*unstructured.Unstructured) *unstructured.Unstructured {
		for _, o := range objs {
			if o.GetKind() == "ServiceMonitor" {
				return o
			}
		}
		return nil
	}
	if sm := find(renderChart(t, "../../charts/fleet", "fleet", "apiServerURL: https://fleet.example.com:6443\n")); sm != nil {
		t.Fatal("a ServiceMonitor by default")
	}
	objs := renderChart(t, "../../charts/fleet", "fleet", "apiServerURL: https://fleet.example.com:6443\nmetrics: {serviceMonitor: {enabled: true, interval: 15s, labels: {release: prom}}}\n")
	sm := find(objs)
	if sm == nil {
		t.Fatal("no ServiceMonitor with metrics.serviceMonitor.enabled")
	}
	if sm.GetAPIVersion() != "monitoring.coreos.com/v1" || sm.GetLabels()["release"] != "prom" {
		t.Errorf("ServiceMonitor %s labels %v", sm.GetAPIVersion(), sm.GetLabels())
	}
	eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	if len(eps) != 1 || eps[0].(map[string]any)["port"] != "metrics" || eps[0].(map[string]any)["interval"] != "15s" {
		t.Errorf("endpoints %v", eps)
	}
	sel, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
	matched := 0
	for _, o := range objs {
		if o.GetKind() != "Service" {
			continue
		}
		all := true
		for k, v := range sel {
			all = all && o.GetLabels()[k] == v
		}
		if all {
			matched++
			ports, _, _ := unstructured.NestedSlice(o.Object, "spec", "ports")
			if len(ports) != 1 || ports[0].(map[string]any)["name"] != "metrics" {
				t.Errorf("Service %s selected without a single port named metrics: %v", o.GetName(), ports)
			}
		}
	}
	if matched != 3 {
		t.Errorf("the ServiceMonitor selects %d Services, want the controller's, fleet-proxy's and fleet-gitops' metrics Services", matched)
	}
}
