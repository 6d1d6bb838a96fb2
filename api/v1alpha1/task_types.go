package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TaskSpec is a piece of work handed to a Dot.
// +kubebuilder:validation:XValidation:rule="has(self.requestedBy) == has(oldSelf.requestedBy)",message="requestedBy is set when a Task is made and never changes"
type TaskSpec struct {
	// dotName is the Dot that does the task, in the same namespace.
	// +kubebuilder:validation:Pattern=`^[a-z0-9-]{1,40}$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="dotName cannot change; make a new Task"
	// +required
	DotName string `json:"dotName"`

	// description is what to do.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=20000
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="description cannot change; make a new Task"
	// +kubebuilder:validation:XValidation:rule="!self.contains('\\u0000')",message="holds a NUL character (U+0000), which cannot be stored: remove it"
	// +required
	Description string `json:"description"`

	// priority orders the Dot's tasks: higher runs first, then older.
	// +kubebuilder:validation:Minimum=-100
	// +kubebuilder:validation:Maximum=100
	// +optional
	Priority int32 `json:"priority,omitempty"`

	// scheduledAt holds the task back until then.
	// +optional
	ScheduledAt *metav1.Time `json:"scheduledAt,omitempty"`

	// cancelRequested asks the Dot to stop the task.
	// +optional
	CancelRequested bool `json:"cancelRequested,omitempty"`

	// requestedBy is the Dot that asked for the task with its delegate_task
	// tool; absent for a task a person or a program gave. Set by the control
	// plane when it makes the task; it never changes.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="requestedBy cannot change; make a new Task"
	// +optional
	RequestedBy *TaskRequester `json:"requestedBy,omitempty"`
}

// TaskRequester is who asked for a delegated task: the asking Dot, the task
// it was working on and how deep the request is in its tree.
type TaskRequester struct {
	// dot is the asking Dot, in the same namespace.
	// +kubebuilder:validation:Pattern=`^[a-z0-9-]{1,40}$`
	// +kubebuilder:validation:MaxLength=40
	// +required
	Dot string `json:"dot"`

	// task is the asker's Task the request was made in; empty when the
	// asker asked from its chat.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Task string `json:"task,omitempty"`

	// depth is 1 for a request made in a task nobody delegated, one more
	// than the asker's task's depth otherwise; at most MaxDelegationDepth.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3
	// +required
	Depth int32 `json:"depth"`

	// event is the id, in the asker's event log, of the tool.called of the
	// delegate_task call that asked.
	// +optional
	Event int64 `json:"event,omitempty"`
}

// Bounds of delegation: how deep a tree of requests goes, and how many of a
// Dot's requests may be open at once (the depth marker repeats the first).
const (
	MaxDelegationDepth  = 3
	MaxDelegationFanOut = 5
)

// RequestedByLabel names, on a delegated Task, the Dot that asked for it, so
// a Dot's requests are listed by selector.
const RequestedByLabel = "dots.invisible.dev/requested-by"

// DelegationApprovalAnnotation names, on a delegated Task, the Approval that
// let its request through: one approval passes one request on.
const DelegationApprovalAnnotation = "dots.invisible.dev/approval"

// TaskPhase is a task's state.
// +kubebuilder:validation:Enum=PENDING;RUNNING;WAITING_APPROVAL;COMPLETED;FAILED;CANCELLED
type TaskPhase string

const (
	TaskPending         TaskPhase = "PENDING"
	TaskRunning         TaskPhase = "RUNNING"
	TaskWaitingApproval TaskPhase = "WAITING_APPROVAL"
	TaskCompleted       TaskPhase = "COMPLETED"
	TaskFailed          TaskPhase = "FAILED"
	TaskCancelled       TaskPhase = "CANCELLED"
)

// Ended says whether a task in phase p is over: it completed, failed or was
// cancelled. These are the phases nothing leads out of: a later report from
// the guest changes the task's spend, never its phase, a cancel has nothing
// left to stop, and an approval asked for the task is moot. The web client
// takes the same list from here (web/src/lib/generated.ts).
func (p TaskPhase) Ended() bool {
	return p == TaskCompleted || p == TaskFailed || p == TaskCancelled
}

// TaskRun is one delivery of the task to the guest.
type TaskRun struct {
	// number counts runs from 1.
	Number int32 `json:"number"`
	// +optional
	Started *metav1.Time `json:"started,omitempty"`
	// +optional
	Delivered *metav1.Time `json:"delivered,omitempty"`
	// +optional
	Finished *metav1.Time `json:"finished,omitempty"`
	// outcome is how the run ended: the phase it ended the task in, or
	// Interrupted (the task was given to the Dot again).
	// +optional
	Outcome string `json:"outcome,omitempty"`
}

// TaskStatus is what the control plane observed of a task.
type TaskStatus struct {
	// +optional
	Phase TaskPhase `json:"phase,omitempty"`
	// runs are the task's deliveries to its Dot, oldest first.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	// +optional
	Runs []TaskRun `json:"runs,omitempty"`
	// startTime is when the task was first given to its Dot (its first
	// run), not when it was made: the time in the queue is not counted.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// completionTime is when the task ended (COMPLETED, FAILED or
	// CANCELLED).
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
	// summary is the Dot's answer when the task completed.
	// +optional
	Summary string `json:"summary,omitempty"`
	// error says why the task failed.
	// +optional
	Error string `json:"error,omitempty"`
	// spentUSD is the model spend of the task.
	// +optional
	SpentUSD float64 `json:"spentUSD,omitempty"`
	// delegatedSpentUSD is the model spend of the tasks this task asked
	// other Dots for (delegate_task), their own requests' included: each
	// counted where it happened, shown here beside the task's own.
	// +optional
	DelegatedSpentUSD float64 `json:"delegatedSpentUSD,omitempty"`
	// progress is the Dot's last progress note.
	// +optional
	Progress string `json:"progress,omitempty"`
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Task is a piece of work handed to a Dot.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=tk,categories=invisible-dots
// +kubebuilder:printcolumn:name="Dot",type=string,JSONPath=`.spec.dotName`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Priority",type=integer,JSONPath=`.spec.priority`,priority=10
// +kubebuilder:printcolumn:name="Spent",type=number,JSONPath=`.status.spentUSD`,priority=10
// +kubebuilder:printcolumn:name="Delegated",type=number,JSONPath=`.status.delegatedSpentUSD`,priority=10
// +kubebuilder:printcolumn:name="Asked By",type=string,JSONPath=`.spec.requestedBy.dot`,priority=10
// +kubebuilder:printcolumn:name="Started",type=date,JSONPath=`.status.startTime`
// +kubebuilder:printcolumn:name="Completed",type=date,JSONPath=`.status.completionTime`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Task struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec TaskSpec `json:"spec"`
	// +optional
	Status TaskStatus `json:"status,omitempty"`
}

// TaskList is a list of Tasks.
// +kubebuilder:object:root=true
type TaskList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Task `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Task{}, &TaskList{})
}
