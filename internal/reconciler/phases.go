package reconciler

import (
	"context"

	ctrl "sigs.k8s.io/controller-runtime"
)

// Phase is one named step of a pass over state S. Every phase reads what
// exists and makes only what is missing, so a pass interrupted anywhere is
// finished by the next one.
type Phase[S any] struct {
	// Name names the phase in logs.
	Name string
	// Run does the phase's work.
	Run func(ctx context.Context, s S) error
	// Skip, when set and true for s, leaves the phase out.
	Skip func(s S) bool
}

// Phases are the phases of a pass, run in order.
type Phases[S any] []Phase[S]

// Run runs the phases in order and stops at the first error (logged at
// V(1) with the phase's name; the error itself is returned as it is, for
// the caller's Outcome).
func (ps Phases[S]) Run(ctx context.Context, s S) error {
	for _, p := range ps {
		if p.Skip != nil && p.Skip(s) {
			continue
		}
		if err := p.Run(ctx, s); err != nil {
			ctrl.LoggerFrom(ctx).V(1).Info("pass stopped", "phase", p.Name, "error", err.Error())
			return err
		}
	}
	return nil
}

// Names returns the names of the phases, in order.
func (ps Phases[S]) Names() []string {
	names := make([]string, 0, len(ps))
	for _, p := range ps {
		names = append(names, p.Name)
	}
	return names
}
