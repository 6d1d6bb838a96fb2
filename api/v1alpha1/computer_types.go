package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RunStrategy is when a Computer's VM should run (DESIGN.md 3).
// +kubebuilder:validation:Enum=OnDemand;Always;Halted
type RunStrategy string

const (
	// RunOnDemand wakes the VM for work and automations and lets it sleep after
	// the Dot's idleTimeout.
	RunOnDemand RunStrategy = "OnDemand"
	// RunAlways keeps the VM running and starts it again when it exits.
	RunAlways RunStrategy = "Always"
	// RunHalted means a person stopped it: automations pause; a message or a
	// task still starts it and sets OnDemand again.
	RunHalted RunStrategy = "Halted"
)

// ComputerState is the VM's state (ref 9.3).
// +kubebuilder:validation:Enum=PROVISIONING;STARTING;RUNNING;STOPPING;STOPPED;ERROR;DELETING
type ComputerState string

const (
	ComputerProvisioning ComputerState = "PROVISIONING"
	ComputerStarting     ComputerState = "STARTING"
	ComputerRunning      ComputerState = "RUNNING"
	ComputerStopping     ComputerState = "STOPPING"
	ComputerStopped      ComputerState = "STOPPED"
	ComputerError        ComputerState = "ERROR"
	ComputerDeleting     ComputerState = "DELETING"
)

// Annotations that ask a Computer's reconciler for a one-off action, so
// kubectl (and `invisible-dots computer start|reboot`) can ask for them
// through the resource. The value is the time of the request (RFC 3339);
// the reconciler records the value it acted on in status
// (handledStartRequest, handledRebootRequest), so each request runs once and
// a new request is a new value. Stopping is spec.runStrategy: Halted.
const (
	// StartRequestedAnnotation starts a stopped VM once (a sleeping OnDemand
	// VM too); with runStrategy Halted it waits until the strategy changes.
	StartRequestedAnnotation = "dots.invisible.dev/start-requested"
	// RebootRequestedAnnotation stops and starts the VM once (a new runtime
	// image, CPU count or memory size applies); a stopped VM is started.
	RebootRequestedAnnotation = "dots.invisible.dev/reboot-requested"
	// SleepRequestedAnnotation puts a running OnDemand VM to sleep once: its
	// engine is told to prepare (POST /v1/agent/prepare-sleep), then it is
	// powered off with stopReason idle. The control plane sets it when the
	// Dot has had no work for its idleTimeout; a person stops a VM with
	// runStrategy Halted instead.
	SleepRequestedAnnotation = "dots.invisible.dev/sleep-requested"
)

// GuestTokenSecretName is the Secret, owned by the Computer, holding its
// guest token: its host agent makes it before the VM's first start and
// reads it, and may read no other host's.
func GuestTokenSecretName(computer string) string { return computer + "-guest-token" }

// StopReason says why a VM is stopped.
// +kubebuilder:validation:Enum=idle;user;exited
type StopReason string

const (
	StopIdle   StopReason = "idle"
	StopUser   StopReason = "user"
	StopExited StopReason = "exited"
)

// ComputerSpec is the VM a Dot owns.
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.nodeName) || (has(self.nodeName) && self.nodeName == oldSelf.nodeName)",message="nodeName cannot change once set: the VM's disk lives on that host",fieldPath=".nodeName",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.disk) || !has(self.disk) || quantity(string(self.disk)).compareTo(quantity(string(oldSelf.disk))) >= 0",messageExpression="'disks only grow: ' + string(self.disk) + ' is smaller than the ' + string(oldSelf.disk) + ' this computer has (what is on a disk stays on it): keep ' + string(oldSelf.disk) + ' or set more'",fieldPath=".disk",reason=FieldValueForbidden
type ComputerSpec struct {
	// cpu is the number of virtual CPUs.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=16
	// +kubebuilder:default=2
	// +optional
	CPU int32 `json:"cpu,omitempty"`

	// memory is the guest's memory.
	// +kubebuilder:default="4Gi"
	// +optional
	Memory resource.Quantity `json:"memory,omitempty"`

	// disk is the size of the guest's disk. It can grow, never shrink: a
	// larger value grows the VM's disk at its next start (the golden image's
	// root file system grows to it at boot).
	// +kubebuilder:default="40Gi"
	// +optional
	Disk resource.Quantity `json:"disk,omitempty"`

	// goldenImage is the version of the golden image the disk is made from;
	// empty takes the newest registered one at creation.
	// +optional
	GoldenImage string `json:"goldenImage,omitempty"`

	// runtimeImage pins the version of the runtime ISO; empty takes the
	// newest registered one at every start (status.conditions RuntimeCurrent
	// says when a newer one waits for a restart).
	// +optional
	RuntimeImage string `json:"runtimeImage,omitempty"`

	// runStrategy is when the VM should run.
	// +kubebuilder:default=OnDemand
	// +optional
	RunStrategy RunStrategy `json:"runStrategy,omitempty"`

	// nodeName is the Host whose host agent runs the VM. Placement sets it
	// when it is empty (or the Dot pins a host); once set it never changes,
	// because the VM's disk lives on that host.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`
	// +optional
	NodeName string `json:"nodeName,omitempty"`

	// startGates hold the VM stopped while any remains, as a Pod's
	// schedulingGates hold its scheduling: a VM that runs keeps running,
	// and one that is stopped is not started, by any request, until the
	// controller that set a gate removes it (the namespace's active-Dots
	// cap: ActiveDotsGate).
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=8
	// +optional
	StartGates []ComputerStartGate `json:"startGates,omitempty"`
}

// ComputerStartGate is one reason a Computer is not started yet.
type ComputerStartGate struct {
	// name names the gate (a qualified name, "dots.invisible.dev/active-dots").
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`
}

// Gated reports whether the Computer carries the start gate name.
func (c *Computer) Gated(name string) bool {
	for _, g := range c.Spec.StartGates {
		if g.Name == name {
			return true
		}
	}
	return false
}

// SetGate adds (on) or removes the start gate name.
func (c *Computer) SetGate(name string, on bool) {
	gates := c.Spec.StartGates[:0:0]
	for _, g := range c.Spec.StartGates {
		if g.Name != name {
			gates = append(gates, g)
		}
	}
	if on {
		gates = append(gates, ComputerStartGate{Name: name})
	}
	if len(gates) == 0 {
		gates = nil
	}
	c.Spec.StartGates = gates
}

// StartFailure records consecutive failed starts, for the crash-loop backoff
// (KubeVirt's rule: the delay grows with the square of the count, with jitter,
// capped at 300 s). It is cleared once a start reaches RUNNING.
type StartFailure struct {
	// consecutiveFailCount is how many starts in a row failed.
	ConsecutiveFailCount int32 `json:"consecutiveFailCount"`
	// retryAfter is the earliest time of the next start.
	// +optional
	RetryAfter *metav1.Time `json:"retryAfter,omitempty"`
	// message is why the last start failed.
	// +optional
	Message string `json:"message,omitempty"`
}

// GuestSystem is what dot-agentd reported of the guest (GET /v1/system).
type GuestSystem struct {
	// runtimeVersion is the version of the runtime ISO the guest mounted,
	// as dot-agentd read it from the ISO's manifest.
	// +optional
	RuntimeVersion    string `json:"runtimeVersion,omitempty"`
	Hostname          string `json:"hostname,omitempty"`
	CPUs              int32  `json:"cpus,omitempty"`
	MemTotalBytes     int64  `json:"memTotalBytes,omitempty"`
	MemAvailableBytes int64  `json:"memAvailableBytes,omitempty"`
	DiskTotalBytes    int64  `json:"diskTotalBytes,omitempty"`
	DiskFreeBytes     int64  `json:"diskFreeBytes,omitempty"`
}

// ComputerStatus is what the host agent observed of the VM.
type ComputerStatus struct {
	// state is the VM's state.
	// +optional
	State ComputerState `json:"state,omitempty"`
	// pid is QEMU's process id on the host while it runs.
	// +optional
	PID int32 `json:"pid,omitempty"`
	// guestPort is the 127.0.0.1 port forwarded to dot-agentd.
	// +optional
	GuestPort int32 `json:"guestPort,omitempty"`
	// hostBootID is the boot of the host the VM was started in.
	// +optional
	HostBootID string `json:"hostBootID,omitempty"`
	// stopReason says why the VM is stopped.
	// +optional
	StopReason StopReason `json:"stopReason,omitempty"`
	// stopDeadline is when a STOPPING VM whose guest has not powered itself
	// off is killed (the kill rule checked again first). Before
	// poweroffTime, it is when a VM going to sleep is told to power off even
	// if its Dot has not left READY yet.
	// +optional
	StopDeadline *metav1.Time `json:"stopDeadline,omitempty"`
	// poweroffTime is when the STOPPING VM's guest was asked to power off.
	// A VM going to sleep is STOPPING without it first, so that its Dot
	// leaves READY and nothing more is delivered to it before its engine
	// prepares for sleep (ref 9.3).
	// +optional
	PoweroffTime *metav1.Time `json:"poweroffTime,omitempty"`
	// lastActiveTime is when the guest last had work.
	// +optional
	LastActiveTime *metav1.Time `json:"lastActiveTime,omitempty"`
	// nextAutomationTime is the next run of one of the Dot's automations.
	// +optional
	NextAutomationTime *metav1.Time `json:"nextAutomationTime,omitempty"`
	// goldenImage and runtimeImage are the versions in use.
	// +optional
	GoldenImage string `json:"goldenImage,omitempty"`
	// +optional
	RuntimeImage string `json:"runtimeImage,omitempty"`
	// system is what the guest reported of itself.
	// +optional
	System *GuestSystem `json:"system,omitempty"`
	// startFailure records failed starts for the crash-loop backoff.
	// +optional
	StartFailure *StartFailure `json:"startFailure,omitempty"`
	// handledStartRequest is the value of the start-requested annotation
	// the reconciler last acted on.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	HandledStartRequest string `json:"handledStartRequest,omitempty"`
	// handledRebootRequest is the value of the reboot-requested annotation
	// the reconciler last acted on.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	HandledRebootRequest string `json:"handledRebootRequest,omitempty"`
	// handledSleepRequest is the value of the sleep-requested annotation
	// the reconciler last acted on.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	HandledSleepRequest string `json:"handledSleepRequest,omitempty"`
	// observedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions: Ready, Placed, Provisioned.
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Computer is the QEMU virtual machine a Dot owns.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=comp,categories=invisible-dots
// +kubebuilder:selectablefield:JSONPath=`.spec.nodeName`
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="Strategy",type=string,JSONPath=`.spec.runStrategy`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Stopped",type=string,JSONPath=`.status.stopReason`
// +kubebuilder:printcolumn:name="Host",type=string,JSONPath=`.spec.nodeName`
// +kubebuilder:printcolumn:name="CPU",type=integer,JSONPath=`.spec.cpu`,priority=10
// +kubebuilder:printcolumn:name="Memory",type=string,JSONPath=`.spec.memory`,priority=10
// +kubebuilder:printcolumn:name="PID",type=integer,JSONPath=`.status.pid`,priority=10
// +kubebuilder:printcolumn:name="Port",type=integer,JSONPath=`.status.guestPort`,priority=10
// +kubebuilder:printcolumn:name="Runtime",type=string,JSONPath=`.status.runtimeImage`,priority=10
// +kubebuilder:printcolumn:name="Runtime-Current",type=string,JSONPath=`.status.conditions[?(@.type=="RuntimeCurrent")].status`,priority=10
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Computer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec ComputerSpec `json:"spec"`
	// +optional
	Status ComputerStatus `json:"status,omitempty"`
}

// ComputerList is a list of Computers.
// +kubebuilder:object:root=true
type ComputerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Computer `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Computer{}, &ComputerList{})
}
