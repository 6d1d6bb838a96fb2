package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Accelerator is how a host runs its guests' CPUs.
// +kubebuilder:validation:Enum=kvm;tcg
type Accelerator string

const (
	// AcceleratorKVM: hardware virtualization, the default.
	AcceleratorKVM Accelerator = "kvm"
	// AcceleratorTCG: software emulation, set by hand in host.yaml on test
	// hosts where KVM cannot boot a guest.
	AcceleratorTCG Accelerator = "tcg"
)

// SystemNamespace holds what the product keeps for itself: one
// coordination.k8s.io Lease per host, named as the host and renewed by its
// host agent (as a Node's lease in kube-node-lease), the central
// controllers' leader Lease, and the hosts' ServiceAccounts.
const SystemNamespace = "invisible-dots-system"

// HostLeaseDuration is how long a host's Lease holds without a renewal;
// after it, the host's Ready condition and its Computers' turn Unknown.
const HostLeaseDuration = 40

// HostResources are amounts of a host's processors, memory and disk.
type HostResources struct {
	// cpu is a number of processors.
	// +optional
	CPU int32 `json:"cpu,omitempty"`
	// memory is an amount of memory.
	// +optional
	Memory resource.Quantity `json:"memory,omitempty"`
	// disk is space on the filesystem of the host's home (VM disks, images).
	// +optional
	Disk resource.Quantity `json:"disk,omitempty"`
}

// HostImage is an image registered on a host.
type HostImage struct {
	// kind is golden (a VM's disk is made from it) or runtime (the ISO of
	// the Dot's binaries).
	// +kubebuilder:validation:Enum=golden;runtime
	Kind string `json:"kind"`
	// version is the image's version.
	Version string `json:"version"`
}

// HostSpec is what people say about a host.
type HostSpec struct {
	// unschedulable keeps new Computers off this host; those on it stay.
	// +optional
	Unschedulable bool `json:"unschedulable,omitempty"`
}

// HostStatus is what a host's agent reports of its machine.
type HostStatus struct {
	// capacity is the machine's processors, memory and the size of the
	// home's filesystem.
	// +optional
	Capacity HostResources `json:"capacity,omitempty"`
	// allocatable is what Computers may take: processors, memory less what
	// the host keeps for itself, and the home filesystem's free space less
	// the same reserve.
	// +optional
	Allocatable HostResources `json:"allocatable,omitempty"`
	// accelerator is how the host runs guests.
	// +optional
	Accelerator Accelerator `json:"accelerator,omitempty"`
	// qemuVersion is the version of the host's QEMU; empty when the host
	// cannot run VMs.
	// +optional
	QEMUVersion string `json:"qemuVersion,omitempty"`
	// images are the golden and runtime images registered on the host.
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	// +optional
	Images []HostImage `json:"images,omitempty"`
	// agentVersion is the version of the host agent.
	// +optional
	AgentVersion string `json:"agentVersion,omitempty"`
	// guestEndpoint is where the host agent serves the guest routes of its
	// Computers to the control plane (files, screenshot, browser identities,
	// tools, skills): the one path by which the control plane reaches any
	// guest, on any host. Empty until the agent serves it.
	// +optional
	GuestEndpoint *HostGuestEndpoint `json:"guestEndpoint,omitempty"`
	// wakeLead is how long before one of its automations is due a sleeping
	// Computer of this host is started (the host's host.yaml wakeLead);
	// empty means the control plane's default, 90s.
	// +optional
	WakeLead *metav1.Duration `json:"wakeLead,omitempty"`
	// conditions: Ready, DiskPressure, MemoryPressure.
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// HostGuestEndpoint is a host agent's HTTPS endpoint of the guest routes.
// Its serving certificate is the agent's own, made at its start; the control
// plane trusts the certificate whose digest the Host says, since only the
// host's own credential may write its Host's status (the host restriction
// admission), as kubelet's serving certificate is trusted through the API.
type HostGuestEndpoint struct {
	// url is https://ADDRESS:PORT, as the control plane reaches it.
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^https://[^/?#\s]+$`
	URL string `json:"url"`
	// certificateSHA256 is the SHA-256 of the serving certificate's DER,
	// in lowercase hex.
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{64}$`
	CertificateSHA256 string `json:"certificateSHA256"`
}

// Host is a machine that runs Computers, registered and kept up to date by
// its host agent (like a Node). Not of the invisible-dots category: a
// person given a namespace lists that category there, and a cluster-scoped
// kind in it would be Forbidden to them (kubectl get hosts lists them).
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Accel",type=string,JSONPath=`.status.accelerator`
// +kubebuilder:printcolumn:name="CPU",type=integer,JSONPath=`.status.allocatable.cpu`
// +kubebuilder:printcolumn:name="Memory",type=string,JSONPath=`.status.allocatable.memory`
// +kubebuilder:printcolumn:name="Disk",type=string,JSONPath=`.status.allocatable.disk`
// +kubebuilder:printcolumn:name="QEMU",type=string,JSONPath=`.status.qemuVersion`,priority=10
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$')",message="a Host's name is a DNS label: 1 to 63 characters of a-z, 0-9 and -, starting and ending with a letter or digit"
type Host struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Spec HostSpec `json:"spec,omitempty"`
	// +optional
	Status HostStatus `json:"status,omitempty"`
}

// HostList is a list of Hosts.
// +kubebuilder:object:root=true
type HostList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Host `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Host{}, &HostList{})
}
