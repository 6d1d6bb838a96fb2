package v1alpha1

import (
	"crypto/sha256"
	"encoding/hex"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ApprovalDecision is a person's answer.
// +kubebuilder:validation:Enum=approve;reject
type ApprovalDecision string

const (
	Approve ApprovalDecision = "approve"
	Reject  ApprovalDecision = "reject"
)

// ApprovalSpec is a tool call a Dot parked until a person decides.
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.decision) || (has(self.decision) && self.decision == oldSelf.decision)",message="a decision cannot change once set"
// +kubebuilder:validation:XValidation:rule="self.dotName == oldSelf.dotName && self.tool == oldSelf.tool && self.permission == oldSelf.permission",message="what was asked cannot change; only decision, note and always are set by a person"
// +kubebuilder:validation:XValidation:rule="has(self.requestID) == has(oldSelf.requestID) && (!has(self.requestID) || self.requestID == oldSelf.requestID)",message="requestID cannot change"
type ApprovalSpec struct {
	// dotName is the Dot that asked.
	// +kubebuilder:validation:Pattern=`^[a-z0-9-]{1,40}$`
	// +required
	DotName string `json:"dotName"`

	// requestID is the guest's id of what it asked (approval.requested's
	// approval_id), which the decision answers; empty for an Approval made
	// by hand, which answers nothing in a guest.
	// +kubebuilder:validation:MaxLength=128
	// +optional
	RequestID string `json:"requestID,omitempty"`

	// taskName is the Task the call belongs to; empty for the chat.
	// +optional
	TaskName string `json:"taskName,omitempty"`

	// tool is the tool the Dot wants to call.
	// +kubebuilder:validation:MinLength=1
	// +required
	Tool string `json:"tool"`

	// permission is the permission the tool needs.
	// +kubebuilder:validation:MinLength=1
	// +required
	Permission string `json:"permission"`

	// arguments are the call's arguments a person may see.
	// +kubebuilder:pruning:PreserveUnknownFields
	// +optional
	Arguments *apiextensionsv1.JSON `json:"arguments,omitempty"`

	// reason is the Dot's explanation.
	// +optional
	Reason string `json:"reason,omitempty"`

	// decision is the person's answer; it cannot change once set.
	// +optional
	Decision ApprovalDecision `json:"decision,omitempty"`

	// note is what the person tells the Dot with the decision.
	// +kubebuilder:validation:MaxLength=4000
	// +kubebuilder:validation:XValidation:rule="!self.contains('\\u0000')",message="holds a NUL character (U+0000), which cannot be stored: remove it"
	// +optional
	Note string `json:"note,omitempty"`

	// always also sets the permission to allow (approve) or deny (reject) in the Dot.
	// +optional
	Always bool `json:"always,omitempty"`

	// alwaysFor bounds an always approval: 1h, or endOfDay (the end of the
	// control plane's day); empty allows for ever. The Dot's
	// spec.allowUntil records the end.
	// +kubebuilder:validation:Enum="1h";endOfDay
	// +optional
	AlwaysFor string `json:"alwaysFor,omitempty"`

	// scope task, on an approval asked because the Dot read untrusted input
	// (taint), also allows the permission for the rest of the task.
	// +kubebuilder:validation:Enum=task
	// +optional
	Scope string `json:"scope,omitempty"`

	// taint is what the Dot read that made the call asked: set when the
	// guest asked because of untrusted input (approval.requested
	// tainted_by).
	// +optional
	Taint *ApprovalTaint `json:"taint,omitempty"`
}

// ApprovalTaint is the untrusted input a call was asked because of.
type ApprovalTaint struct {
	// kind is page, screenshot, download, mcp, webhook or delegation.
	// +kubebuilder:validation:MaxLength=32
	Kind string `json:"kind"`
	// source names it: a URL, a file, a server, a webhook, a Dot.
	// +kubebuilder:validation:MaxLength=2048
	Source string `json:"source"`
}

// ApprovalPhase is where an approval stands.
// +kubebuilder:validation:Enum=Pending;Approved;Rejected;Expired
type ApprovalPhase string

const (
	ApprovalPending  ApprovalPhase = "Pending"
	ApprovalApproved ApprovalPhase = "Approved"
	ApprovalRejected ApprovalPhase = "Rejected"
	ApprovalExpired  ApprovalPhase = "Expired"
)

// ApprovalStatus is what the control plane did with the decision.
type ApprovalStatus struct {
	// +optional
	Phase ApprovalPhase `json:"phase,omitempty"`
	// +optional
	DecidedAt *metav1.Time `json:"decidedAt,omitempty"`
	// deliveredAt is when the guest received the decision.
	// +optional
	DeliveredAt *metav1.Time `json:"deliveredAt,omitempty"`
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Approval is a tool call waiting for a person's decision.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=appr,categories=invisible-dots
// +kubebuilder:printcolumn:name="Dot",type=string,JSONPath=`.spec.dotName`
// +kubebuilder:printcolumn:name="Tool",type=string,JSONPath=`.spec.tool`
// +kubebuilder:printcolumn:name="Decision",type=string,JSONPath=`.spec.decision`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Approval struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec ApprovalSpec `json:"spec"`
	// +optional
	Status ApprovalStatus `json:"status,omitempty"`
}

// ApprovalName is the name of the Approval of a guest's request: the Dot's
// name and a digest of the request id, the same every time. It is part of
// the API, beside the types: the control plane makes the Approval under this
// name (once per request, whoever reads the request first), and a client
// that holds a request id (the command line's approve, a chat's ask) finds
// the Approval by it without listing.
func ApprovalName(dot, requestID string) string {
	sum := sha256.Sum256([]byte(requestID))
	return dot + "-" + hex.EncodeToString(sum[:5])
}

// ApprovalList is a list of Approvals.
// +kubebuilder:object:root=true
type ApprovalList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Approval `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Approval{}, &ApprovalList{})
}
