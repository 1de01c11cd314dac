package sharding

import (
	"fmt"
	"testing"
)

func TestEveryKeyHasExactlyOneShard(t *testing.T) {
	const n = 3
	counts := make([]int, n)
	for k := 0; k < 3000; k++ {
		key := fmt.Sprintf("fleet-default/cluster-%d", k)
		owners := 0
		for i := 0; i < n; i++ {
			if (Shard{Index: i, Count: n}).OwnsKey(key) {
				owners++
				counts[i]++
			}
		}
		if owners != 1 {
			t.Fatalf("%s has %d owners", key, owners)
		}
	}
	for i, c := range counts {
		if c < 800 || c > 1200 {
			t.Errorf("shard %d owns %d of 3000 keys: badly balanced", i, c)
		}
	}
}

func TestShardLabelPinsACluster(t *testing.T) {
	s := Shard{Index: 2, Count: 3}
	if !s.OwnsCluster("ns", "c", "id", map[string]string{"fleet.cattle.io/shard-id": "2"}) {
		t.Error("label 2 must pin to shard 2")
	}
	if (Shard{Index: 0, Count: 3}).OwnsCluster("ns", "c", "id", map[string]string{"fleet.cattle.io/shard-id": "2"}) {
		t.Error("shard 0 must not own a cluster pinned to 2")
	}
	if !(Shard{}).OwnsCluster("ns", "c", "", nil) {
		t.Error("an unsharded controller owns everything")
	}
	if err := (Shard{Index: 3, Count: 3}).Validate(); err == nil {
		t.Error("index 3 of 3 accepted")
	}
}
