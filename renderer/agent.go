package renderer

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/gitops-fleet/fleet/charts"
	"github.com/gitops-fleet/fleet/internal/registration"
	"github.com/gitops-fleet/fleet/renderer/agentvalues"
)

// AgentReleaseName is the Helm release name of the agent chart.
const AgentReleaseName = "fleet-agent"

// AgentKinds are the kinds of every object the agent chart can render, and
// the Namespace a push makes for them. The controller learns their REST
// mappings from a downstream cluster while its import token is prepared, so
// the push that follows starts without discovery; a kind missing here costs
// that push a discovery round trip, no more (TestAgentKinds keeps it whole).
var AgentKinds = []schema.GroupKind{
	{Kind: "Namespace"},
	{Kind: "ConfigMap"},
	{Kind: "Secret"},
	{Kind: "Service"},
	{Kind: "ServiceAccount"},
	{Group: "apps", Kind: "Deployment"},
	{Group: "networking.k8s.io", Kind: "NetworkPolicy"},
	{Group: "policy", Kind: "PodDisruptionBudget"},
	{Group: "rbac.authorization.k8s.io", Kind: "ClusterRole"},
	{Group: "rbac.authorization.k8s.io", Kind: "ClusterRoleBinding"},
	{Group: "rbac.authorization.k8s.io", Kind: "Role"},
	{Group: "rbac.authorization.k8s.io", Kind: "RoleBinding"},
	{Group: "scheduling.k8s.io", Kind: "PriorityClass"},
}

// AgentRenderer renders charts/fleet-agent, parsed once.
type AgentRenderer struct {
	chart *Chart
}

// NewAgentRenderer parses the agent chart embedded in the binary.
func NewAgentRenderer() (*AgentRenderer, error) {
	return NewAgentRendererFS(charts.FleetAgent())
}

// NewAgentRendererFS parses an agent chart from a filesystem.
func NewAgentRendererFS(fsys fs.FS) (*AgentRenderer, error) {
	ch, err := LoadChartFS(fsys, ".")
	if err != nil {
		return nil, err
	}
	return &AgentRenderer{chart: ch}, nil
}

// ChartDigest identifies the agent chart this renderer renders (see
// Chart.Digest): for the embedded chart, the chart this binary ships.
func (r *AgentRenderer) ChartDigest() string { return r.chart.Digest() }

// Hash identifies the agent rendered from v: its values (Values.Hash) and
// the chart. A controller upgrade that ships a changed agent chart
// changes it, so the agents are rolled to the new chart once; a restart with
// the same chart does not.
func (r *AgentRenderer) Hash(v *agentvalues.Values) (string, error) {
	vh, err := v.Hash()
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(r.ChartDigest() + "\n" + vh))
	return hex.EncodeToString(sum[:]), nil
}

// Render renders the agent for the values, as release fleet-agent in the
// agent namespace.
func (r *AgentRenderer) Render(v *agentvalues.Values) (*Output, error) {
	// JSON is YAML and is read into the same values as the YAML values file
	// (the helm-template parity test checks it), at a fraction of the cost.
	vals, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return Render(Input{Chart: r.chart, ReleaseName: AgentReleaseName, Namespace: v.Internal.SystemNamespace, Values: vals})
}

// InjectBootstrapToken returns a copy of the rendered agent objects with the
// real import token in the bootstrap Secret, where the render put
// agentvalues.TokenPlaceholder. Only the object list sent to the cluster carries it.
func InjectBootstrapToken(objs []*unstructured.Unstructured, token string) ([]*unstructured.Unstructured, error) {
	out := make([]*unstructured.Unstructured, len(objs))
	found := false
	placeholder := base64.StdEncoding.EncodeToString([]byte(agentvalues.TokenPlaceholder))
	for i, o := range objs {
		out[i] = o
		if o.GetKind() != "Secret" || o.GetName() != registration.BootstrapSecretName {
			continue
		}
		cur, _, _ := unstructured.NestedString(o.Object, "data", "token")
		if cur != placeholder {
			return nil, errors.New("the rendered bootstrap Secret has no token placeholder to fill")
		}
		c := o.DeepCopy()
		if err := unstructured.SetNestedField(c.Object, base64.StdEncoding.EncodeToString([]byte(token)), "data", "token"); err != nil {
			return nil, err
		}
		out[i] = c
		found = true
	}
	if !found {
		return nil, fmt.Errorf("the rendered agent has no %s Secret", registration.BootstrapSecretName)
	}
	return out, nil
}
