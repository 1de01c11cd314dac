package targeting

import (
	"errors"
	"fmt"
	"strings"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
)

// PartitionSelects reports whether partition i of a Bundle's
// rolloutStrategy selects the cluster, by the rule of targets: every
// criterion it gives must hold (clusterName, clusterSelector, clusterGroup,
// clusterGroupSelector), and with none it selects nothing. An invalid
// selector is an error naming the partition.
func PartitionSelects(i int, p *fleet.Partition, c *fleet.Cluster, groups Groups) (bool, error) {
	t := &fleet.BundleTarget{ClusterName: p.ClusterName, ClusterSelector: p.ClusterSelector, ClusterGroup: p.ClusterGroup, ClusterGroupSelector: p.ClusterGroupSelector}
	ok, err := selects(i, t, c, groups)
	if err != nil {
		// selects words its errors for targets.
		return false, errors.New(strings.Replace(err.Error(), fmt.Sprintf("spec.targets[%d]", i), fmt.Sprintf("spec.rolloutStrategy.partitions[%d]", i), 1))
	}
	return ok, nil
}
