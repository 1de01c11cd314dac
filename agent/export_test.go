package agent

// SetStepHook lets tests act at each step of the handshake.
func (a *Agent) SetStepHook(f func(step string)) { a.stepHook = f }
