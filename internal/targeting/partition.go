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
	field := fmt.Sprintf("spec.rolloutStrategy.partitions[%d]", i)
	s := selection{p.ClusterName, p.ClusterSelector, p.ClusterGroup, p.ClusterGroupSelector}
	ok, err := selects(field, i, false, s, c, groups)
	if mg := (*MissingGroupsError)(nil); errors.As(err, &mg) {
		// MissingGroupsError names targets and restrictions only.
		return false, errors.New(strings.Replace(mg.Error(), fmt.Sprintf("spec.targets[%d]", i), field, 1))
	}
	return ok, err
}
