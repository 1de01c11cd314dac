package bundlereader

import (
	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
	"github.com/gitops-fleet/fleet/internal/strictyaml"
)

// GitRepoTargets are what Fleet makes of a GitRepo's targets for fleet
// apply (its targets file): each target both a Bundle target and a target
// restriction, so a fleet.yaml's targetCustomizations customise within
// them but cannot widen them; no targets: the ClusterGroup "default".
func GitRepoTargets(targets []fleet.BundleTargetRestriction) ([]fleet.BundleTarget, []fleet.BundleTargetRestriction) {
	if len(targets) == 0 {
		targets = []fleet.BundleTargetRestriction{{Name: "default", ClusterGroup: "default"}}
	}
	var bt []fleet.BundleTarget
	var rs []fleet.BundleTargetRestriction
	for _, t := range targets {
		t := *t.DeepCopy()
		bt = append(bt, fleet.BundleTarget{Name: t.Name, ClusterName: t.ClusterName, ClusterSelector: t.ClusterSelector,
			ClusterGroup: t.ClusterGroup, ClusterGroupSelector: t.ClusterGroupSelector})
		rs = append(rs, *t.DeepCopy())
	}
	return bt, rs
}

// TargetsFile is Fleet's fleet apply --targets-file: a BundleSpec document
// with targets and targetRestrictions.
type TargetsFile struct {
	Targets            []fleet.BundleTarget            `json:"targets,omitempty"`
	TargetRestrictions []fleet.BundleTargetRestriction `json:"targetRestrictions,omitempty"`
}

// ReadTargetsFile decodes a targets file (YAML or JSON) strictly.
func ReadTargetsFile(name string, data []byte) (*TargetsFile, error) {
	tf := &TargetsFile{}
	if err := strictyaml.Unmarshal(data, tf); err != nil {
		return nil, locate(name, data, err)
	}
	return tf, nil
}
