package registration

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
)

// Why an agent label was not copied to the Cluster made for its
// registration.
const (
	LabelReserved   = "reserved prefix"
	LabelNotAllowed = "key not in agentLabelKeys"
	LabelInvalid    = "invalid key or value"
	LabelsIgnored   = "ignoreClusterRegistrationLabels is on"
)

// RefusedLabel is an agent label left out of its Cluster, and why.
type RefusedLabel struct {
	Key, Reason string
}

// ClusterLabels splits the labels an agent asked for (spec.clusterLabels of
// its ClusterRegistration, chosen by whoever holds the token) into those a
// new Cluster gets and those it does not. Keys under a reserved prefix
// (fleet.cattle.io/, management.cattle.io/; except the created-by-agent-pod
// label the agent sets itself) are always refused, as are keys allowed
// rejects (nil allows every key) and invalid keys or values; with ignore
// set, every label is refused. refused is sorted by key.
func ClusterLabels(requested map[string]string, allowed func(key string) bool, ignore bool) (kept map[string]string, refused []RefusedLabel) {
	kept = map[string]string{}
	for k, v := range requested {
		reason := ""
		switch {
		case ignore:
			reason = LabelsIgnored
		case ReservedLabel(k):
			reason = LabelReserved
		case len(validation.IsQualifiedName(k)) > 0 || len(validation.IsValidLabelValue(v)) > 0:
			reason = LabelInvalid
		case k != fleet.CreatedByAgentPodLabel && allowed != nil && !allowed(k):
			reason = LabelNotAllowed
		}
		if reason != "" {
			refused = append(refused, RefusedLabel{Key: k, Reason: reason})
			continue
		}
		kept[k] = v
	}
	slices.SortFunc(refused, func(a, b RefusedLabel) int { return strings.Compare(a.Key, b.Key) })
	return kept, refused
}

// NewClusterLabels are the labels of a Cluster made for a registration:
// the agent's labels ClusterLabels keeps (never reserved or invalid ones,
// only keys allowed lets through, none with ignore set), plus the cluster
// label naming the Cluster, which no agent label overrides.
func NewClusterLabels(requested map[string]string, cluster string, allowed func(key string) bool, ignore bool) map[string]string {
	labels, _ := ClusterLabels(requested, allowed, ignore)
	labels[fleet.ClusterLabel] = cluster
	return labels
}

// ReservedLabel reports whether an agent may never set the label key: it
// is under fleet.cattle.io/ or management.cattle.io/ and is not the
// created-by-agent-pod label.
func ReservedLabel(key string) bool {
	if key == fleet.CreatedByAgentPodLabel {
		return false
	}
	for _, p := range fleet.ReservedLabelPrefixes {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	return false
}

// maxListedLabels bounds how many refused labels a message names: the
// labels come from the registering side, in any number.
const maxListedLabels = 10

// DescribeRefusedLabels says which labels were left out and why, for a
// condition message or an event; at most maxListedLabels keys, each quoted
// and cut to 63 characters.
func DescribeRefusedLabels(refused []RefusedLabel) string {
	if len(refused) == 0 {
		return ""
	}
	byReason := map[string][]string{}
	var reasons []string
	for i, r := range refused {
		if i == maxListedLabels {
			break
		}
		if _, ok := byReason[r.Reason]; !ok {
			reasons = append(reasons, r.Reason)
		}
		k := r.Key
		if len(k) > validation.LabelValueMaxLength {
			k = k[:validation.LabelValueMaxLength] + "..."
		}
		byReason[r.Reason] = append(byReason[r.Reason], fmt.Sprintf("%q", k))
	}
	slices.Sort(reasons)
	parts := make([]string, 0, len(reasons))
	for _, reason := range reasons {
		parts = append(parts, strings.Join(byReason[reason], ", ")+" ("+reason+")")
	}
	s := strings.Join(parts, "; ")
	if n := len(refused) - maxListedLabels; n > 0 {
		s += fmt.Sprintf("; and %d more", n)
	}
	return s
}
