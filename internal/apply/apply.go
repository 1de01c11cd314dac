// Package apply is the project's one server-side apply path: every object the
// controller or the agent writes to a cluster from rendered manifests goes
// through a fluxcd/pkg/ssa ResourceManager made here, under a fixed field
// manager.
package apply

import (
	"bytes"
	"context"
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

// Option changes what NewManager makes.
type Option func(*options)

type options struct {
	statusReader client.Reader
	fieldManager string
}

// WithFieldManager makes the manager apply under name instead of
// FieldManager: for a writer with an identity of its own (the source
// component, fleet-gitops), whose fields must not be the controller's.
func WithFieldManager(name string) Option {
	return func(o *options) { o.fieldManager = name }
}

// WithStatusReader makes the manager read the objects it waits for (the
// CRDs, namespaces and cluster roles of a staged apply) with r instead of
// the client that applies them. The agent applies a Bundle with
// serviceAccount as that ServiceAccount, and waits with its own identity:
// the wait lists whole kinds, which the ServiceAccount need not be allowed.
func WithStatusReader(r client.Reader) Option {
	return func(o *options) { o.statusReader = r }
}

// NewManager returns a ResourceManager that applies to the cluster behind c.
func NewManager(c client.Client, opts ...Option) *ssa.ResourceManager {
	o := options{statusReader: c, fieldManager: FieldManager}
	for _, opt := range opts {
		opt(&o)
	}
	poller := polling.NewStatusPoller(o.statusReader, c.RESTMapper(), polling.Options{})
	return ssa.NewResourceManager(c, poller, ssa.Owner{Field: o.fieldManager, Group: OwnerGroup})
}

// ReadObjects decodes multi-document YAML (or JSON) into objects.
func ReadObjects(manifests []byte) ([]*unstructured.Unstructured, error) {
	objs, err := ssautil.ReadObjects(bytes.NewReader(manifests))
	if err != nil {
		return nil, fmt.Errorf("decoding manifests: %w", err)
	}
	return objs, nil
}

// ApplyNew server-side applies obj through c, under FieldManager with
// ownership forced, as a manager from NewManager applies an object its read
// does not find, without that read and the server-side dry run (which, for
// a new object, only predict its creation). Only for an object the caller
// knows does not exist: one in a namespace it made in the same pass. The
// object gets the managed fields that manager's Apply would give it, so a
// later Apply of it finds nothing to change. obj is not modified.
func ApplyNew(ctx context.Context, c client.Client, obj *unstructured.Unstructured) error {
	o := obj.DeepCopy()
	if err := c.Patch(ctx, o, client.Apply, client.ForceOwnership, client.FieldOwner(FieldManager)); err != nil {
		return fmt.Errorf("%s apply failed: %w", ssautil.FmtUnstructured(o), err)
	}
	return nil
}
