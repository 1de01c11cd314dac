package v1alpha1

// Reasons of a Bundle whose Helm values cannot be computed for a cluster
// (renderer.ResolveValues, the controller's valuesFrom reads).
const (
	// ValuesTemplateFailedReason: a `${ }` template of helm.values or
	// helm.templateValues does not parse or execute for a cluster.
	ValuesTemplateFailedReason = "ValuesTemplateFailed"
	// ValuesFromInvalidReason: a helm.valuesFrom source is missing, lacks
	// its key, or does not hold a YAML map of values.
	ValuesFromInvalidReason = "ValuesFromInvalid"
	// ValuesFromNotAllowedReason: a helm.valuesFrom source is in another
	// namespace than the Bundle's workspace.
	ValuesFromNotAllowedReason = "ValuesFromNotAllowed"
)
