package reconciler

import "context"

// Phase is one named step of a pass over state S. Every phase reads what
// exists and makes only what is missing, so a pass interrupted after any
// phase is finished by the next one.
type Phase[S any] struct {
	// Name names the phase in logs and for the test hook.
	Name string
	// Run does the phase's work.
	Run func(ctx context.Context, s S) error
	// Skip, when set and true for s, leaves the phase out (the hook is not
	// called either).
	Skip func(s S) bool
}

// Hook is called after each phase (and each Mark) of a pass; tests use it
// to stop the process right there. nil in production.
type Hook func(phase string)

// Mark reports that the externally visible step name just happened. With a
// hook set it calls it and then ends the pass when ctx has ended (the hook
// stopped the process), so nothing after the step is done; without one it
// costs a nil check.
func (h Hook) Mark(ctx context.Context, name string) error {
	if h == nil {
		return nil
	}
	h(name)
	return ctx.Err()
}

// Phases are the phases of a pass, run in order.
type Phases[S any] []Phase[S]

// Run runs the phases in order and stops at the first error; hook marks
// the end of each phase.
func (ps Phases[S]) Run(ctx context.Context, hook Hook, s S) error {
	for _, p := range ps {
		if p.Skip != nil && p.Skip(s) {
			continue
		}
		if err := p.Run(ctx, s); err != nil {
			return err
		}
		if err := hook.Mark(ctx, p.Name); err != nil {
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
