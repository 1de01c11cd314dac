package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// AgentRollout is one revision of what every agent is rendered from (the
// agent chart the controller ships and the agent settings of the controller
// configuration) and the progress of rolling it out to the agents, as a
// ReplicaSet is a revision of a Deployment. The controller makes one when
// that revision changes (a controller upgrade with a changed agent chart, an
// agent setting in the configuration) and, with a staged strategy, admits
// the Clusters to it wave by wave. It keeps the revision's chart and
// configuration, so a later rollout can put agents back on it.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,categories=fleet,shortName=ar
// +kubebuilder:printcolumn:name="Current",type=boolean,JSONPath=`.status.current`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Wave",type=string,JSONPath=`.status.display.wave`
// +kubebuilder:printcolumn:name="Updated",type=integer,JSONPath=`.status.updated`
// +kubebuilder:printcolumn:name="Pending",type=integer,JSONPath=`.status.pending`
// +kubebuilder:printcolumn:name="Failed",type=integer,JSONPath=`.status.failed`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type AgentRollout struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Spec AgentRolloutSpec `json:"spec,omitempty"`
	// +optional
	Status AgentRolloutStatus `json:"status,omitempty"`
}

// AgentRolloutList is a list of AgentRollouts.
//
// +kubebuilder:object:root=true
type AgentRolloutList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AgentRollout `json:"items"`
}

// AgentRolloutSpec is the revision (written by the controller) and the
// operator's controls (paused, aborted).
type AgentRolloutSpec struct {
	// revision identifies the agent chart and the configuration's agent
	// settings (a sha256).
	// +kubebuilder:validation:MaxLength=64
	Revision string `json:"revision"`
	// previousRevision is the revision the agents ran before, the one a
	// rollback puts them back on.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	PreviousRevision string `json:"previousRevision,omitempty"`
	// chart is the agent chart of this revision, a gzipped tar archive.
	// +optional
	Chart []byte `json:"chart,omitempty"`
	// config is the controller configuration of this revision (JSON).
	// +optional
	Config string `json:"config,omitempty"`
	// strategy is the configuration's agentRollout when the rollout began;
	// none rolls every agent at once.
	// +optional
	Strategy *AgentRolloutStrategy `json:"strategy,omitempty"`
	// paused stops admitting Clusters to further waves (`fleet rollout
	// pause`); clearing it resumes, and also resumes a halted rollout, with
	// a new deadline for the wave (`fleet rollout resume`).
	// +optional
	Paused bool `json:"paused,omitempty"`
	// resumeGeneration: `fleet rollout resume` bumps it to retry a halted
	// wave; the rollout records the value it acted on.
	// +optional
	ResumeGeneration int64 `json:"resumeGeneration,omitempty"`
	// aborted ends the rollout for good: no further Cluster is admitted and
	// every Cluster it updated goes back to the previous revision
	// (`fleet rollout abort`).
	// +optional
	Aborted bool `json:"aborted,omitempty"`
}

// AgentRolloutStrategy says how agents are rolled when the revision
// changes. It is the controller configuration's agentRollout.
type AgentRolloutStrategy struct {
	// canary, when set, is the first wave: these Clusters update alone, and
	// the rest wait until they are Ready on the new revision.
	// +optional
	Canary *AgentRolloutCanary `json:"canary,omitempty"`
	// maxUnavailable bounds each later wave: a count, or a percentage of the
	// Clusters to update (rounded up). Default 100%: one wave.
	// +optional
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`
	// progressDeadline bounds how long a wave may take to be Ready before
	// the rollout halts (default 10m).
	// +optional
	ProgressDeadline *metav1.Duration `json:"progressDeadline,omitempty"`
	// autoRollback puts the Clusters of a failed wave back on the previous
	// revision.
	// +optional
	AutoRollback bool `json:"autoRollback,omitempty"`
}

// AgentRolloutCanary picks the canary wave: the Clusters matching selector
// or, without one, the first count Clusters in rollout order.
type AgentRolloutCanary struct {
	// +optional
	// +kubebuilder:validation:Minimum=0
	Count int32 `json:"count,omitempty"`
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
}

// Phases of an AgentRollout.
const (
	RolloutProgressing = "Progressing"
	RolloutPaused      = "Paused"
	RolloutHalted      = "Halted"
	RolloutComplete    = "Complete"
	RolloutAborted     = "Aborted"
	// RolloutSuperseded: a newer revision replaced this one before it
	// completed.
	RolloutSuperseded = "Superseded"
)

// AgentRolloutStatus is the plan and how far it got.
type AgentRolloutStatus struct {
	// conditions are Ready (every planned Cluster runs the revision),
	// Reconciling (a wave is in progress, or the rollout is paused) and
	// Stalled (halted, aborted, superseded, or a rollout the controller
	// cannot plan: the message says what to do).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// current marks the rollout of the revision the controller renders
	// agents at now.
	// +optional
	Current bool `json:"current,omitempty"`
	// phase: Progressing, Paused, Halted, Complete, Aborted or Superseded.
	// +optional
	Phase string `json:"phase,omitempty"`
	// message says what the rollout waits for, or why it halted.
	// +optional
	Message string `json:"message,omitempty"`
	// waves is the plan: the Clusters ("namespace/name") each wave updates,
	// the canary first. Clusters that appear later join the last wave.
	// +optional
	// +listType=atomic
	Waves []AgentRolloutWave `json:"waves,omitempty"`
	// wave is the index of the wave in progress; len(waves) when done.
	// +optional
	Wave int32 `json:"wave"`
	// waveStarted is when the wave in progress began; its deadline counts
	// from here.
	// +optional
	WaveStarted *metav1.Time `json:"waveStarted,omitempty"`
	// resumedGeneration is the spec.resumeGeneration last acted on.
	// +optional
	ResumedGeneration int64 `json:"resumedGeneration,omitempty"`
	// clusters, updated, pending and failed count the planned Clusters:
	// updated run this revision and are Ready, failed missed their wave's
	// deadline (and, with autoRollback, went back).
	// +optional
	Clusters int32 `json:"clusters"`
	// +optional
	Updated int32 `json:"updated"`
	// +optional
	Pending int32 `json:"pending"`
	// +optional
	Failed int32 `json:"failed"`
	// failedClusters names the Clusters that missed their wave's deadline.
	// +optional
	// +listType=atomic
	FailedClusters []string `json:"failedClusters,omitempty"`
	// rolledBack names the Clusters put back on the previous revision.
	// +optional
	// +listType=atomic
	RolledBack []string `json:"rolledBack,omitempty"`
	// completed is when every planned Cluster was updated.
	// +optional
	Completed *metav1.Time `json:"completed,omitempty"`
	// +optional
	Display AgentRolloutDisplay `json:"display,omitempty"`
}

// AgentRolloutWave is one wave of the plan.
type AgentRolloutWave struct {
	// canary marks the canary wave.
	// +optional
	Canary bool `json:"canary,omitempty"`
	// +listType=atomic
	Clusters []string `json:"clusters"`
}

// AgentRolloutDisplay holds short strings for kubectl columns.
type AgentRolloutDisplay struct {
	// wave is "<waves done>/<waves>".
	// +optional
	Wave string `json:"wave,omitempty"`
}

func init() {
	SchemeBuilder.Register(&AgentRollout{}, &AgentRolloutList{})
}
