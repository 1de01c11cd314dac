package rollout

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleet "github.com/gitops-fleet/fleet/api/v1alpha1"
)

// The operator's controls of a rollout (`fleet rollout`): each one patch of
// the AgentRollout's spec, acted on by the reconciler.

// ErrNoRollout: no AgentRollout exists yet.
var ErrNoRollout = errors.New("no AgentRollout exists: the controller makes one per agent revision once it runs with this version")

// Latest is the current revision's rollout (status.current), or else the
// one most recently started.
func Latest(ctx context.Context, c client.Reader) (*fleet.AgentRollout, error) {
	list := &fleet.AgentRolloutList{}
	if err := c.List(ctx, list); err != nil {
		return nil, err
	}
	if len(list.Items) == 0 {
		return nil, ErrNoRollout
	}
	for i := range list.Items {
		if list.Items[i].Status.Current {
			return &list.Items[i], nil
		}
	}
	last := func(ro *fleet.AgentRollout) time.Time {
		t := ro.CreationTimestamp.Time
		if s := ro.Status.WaveStarted; s != nil && s.After(t) {
			t = s.Time
		}
		return t
	}
	sort.Slice(list.Items, func(i, j int) bool { return last(&list.Items[i]).After(last(&list.Items[j])) })
	return &list.Items[0], nil
}

// Pause stops the rollout from admitting further waves.
func Pause(ctx context.Context, c client.Client, name string) error {
	return patchSpec(ctx, c, name, `{"spec":{"paused":true}}`)
}

// Resume lifts a pause and retries a halted wave with a new deadline.
func Resume(ctx context.Context, c client.Client, name string) error {
	// Optimistic lock, retried on the latest version: two resumes at once
	// count as one, and the controller's status writes meanwhile do not
	// make it fail.
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ro := &fleet.AgentRollout{}
		if err := c.Get(ctx, client.ObjectKey{Name: name}, ro); err != nil {
			return err
		}
		if ro.Spec.Aborted {
			return fmt.Errorf("AgentRollout %s was aborted: an aborted rollout does not resume; change the configuration (or upgrade) for a new revision", name)
		}
		patch := fmt.Sprintf(`{"metadata":{"resourceVersion":%q},"spec":{"paused":false,"resumeGeneration":%d}}`, ro.ResourceVersion, ro.Spec.ResumeGeneration+1)
		return c.Patch(ctx, ro, client.RawPatch(types.MergePatchType, []byte(patch)), client.FieldOwner("fleet-rollout"))
	})
}

// Abort ends the rollout: every Cluster it updated goes back to the
// previous revision, and no further one is admitted.
func Abort(ctx context.Context, c client.Client, name string) error {
	return patchSpec(ctx, c, name, `{"spec":{"aborted":true}}`)
}

func patchSpec(ctx context.Context, c client.Client, name, patch string) error {
	ro := &fleet.AgentRollout{}
	ro.Name = name
	if err := c.Patch(ctx, ro, client.RawPatch(types.MergePatchType, []byte(patch)), client.FieldOwner("fleet-rollout")); err != nil {
		return fmt.Errorf("AgentRollout %s: %w", name, err)
	}
	return nil
}
