package registration

// GrantSteps are the steps a test can stop a grant after, in the order a
// first grant passes them.
var GrantSteps = []string{
	stepCluster,
	stepFinalizer,
	stepNamespace,
	// (stepCredentialAccess runs only for a registration without a key,
	// an older agent's; the restart test registers as this release's.)
	stepSuperseded,
	stepRequestIdentity,
	stepToken,
	stepCredentialSecret,
	stepStatus,
}

// StepCredentialSecret and StepStatus name the steps after which the
// credential Secret, and the granted status, exist.
const (
	StepCredentialSecret = stepCredentialSecret
	StepStatus           = stepStatus
)

// SetStepHook sets the hook called after each step of a grant; set it before
// the manager starts. A hook that ends the manager's context (the one its
// runnables derive from) stops the pass right after the step.
func SetStepHook(r *Reconciler, hook func(step string)) { r.hook = hook }
