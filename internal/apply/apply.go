// Package apply is the project's one server-side apply path: every object the
// controller or the agent writes to a cluster from rendered manifests goes
// through a fluxcd/pkg/ssa ResourceManager made here, under a fixed field
// manager.
package apply

import (
	"bytes"
	"fmt"

	"github.com/fluxcd/cli-utils/pkg/kstatus/polling"
	"github.com/fluxcd/pkg/ssa"
	ssautil "github.com/fluxcd/pkg/ssa/utils"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

const (
	// FieldManager owns every field the controller and the agent apply.
	// The controller's first deploy of an agent and the agent's later
	// adoption of its own Bundle use the same name, so adoption makes no
	// conflicts. Never rename it: existing objects are owned by it.
	FieldManager = "fleet"

	// OwnerGroup prefixes the ownership labels ssa sets on applied objects.
	OwnerGroup = "fleet.cattle.io"
)

// NewManager returns a ResourceManager for the cluster behind c.
func NewManager(c client.Client) *ssa.ResourceManager {
	poller := polling.NewStatusPoller(c, c.RESTMapper(), polling.Options{})
	return ssa.NewResourceManager(c, poller, ssa.Owner{Field: FieldManager, Group: OwnerGroup})
}

// ReadObjects decodes multi-document YAML (or JSON) into objects.
func ReadObjects(manifests []byte) ([]*unstructured.Unstructured, error) {
	objs, err := ssautil.ReadObjects(bytes.NewReader(manifests))
	if err != nil {
		return nil, fmt.Errorf("decoding manifests: %w", err)
	}
	return objs, nil
}
