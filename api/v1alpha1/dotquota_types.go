package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DotQuotaName is the one name a DotQuota may have: one per namespace, as a
// person expects when they write "the namespace's quota".
const DotQuotaName = "default"

// ActiveDotsGate is the start gate (Computer spec.startGates) that holds a
// Computer of a namespace with an active-Dots cap until its Dot holds a
// slot in the namespace's DotQuota.
const ActiveDotsGate = "dots.invisible.dev/active-dots"

// DotQuotaSpec is a namespace's caps: how many Dots may be active at once
// and how much the namespace's Dots may spend in a day.
type DotQuotaSpec struct {
	// activeDots caps the Dots of the namespace whose computers run at
	// once (started, starting or running). A Dot beyond it stays inactive,
	// its work queued, until another's computer stops. Unset: no cap.
	// Lowering it stops nothing already running.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10000
	// +optional
	ActiveDots *int32 `json:"activeDots,omitempty"`

	// spendPerDayUSD caps what the namespace's Dots spend in a day, in US
	// dollars as a decimal string ("5", "12.50"): once reached, no new task
	// or message is delivered to any of them until a person allows more
	// for the day or the day ends. Unset: no cap. A string, not a float,
	// as Kubernetes APIs keep money and other exact decimals.
	// +kubebuilder:validation:Pattern=`^[0-9]{1,7}(\.[0-9]{1,2})?$`
	// +optional
	SpendPerDayUSD *string `json:"spendPerDayUSD,omitempty"`

	// timeZone is where the day begins, an IANA name ("Europe/Paris");
	// UTC when unset (as a CronJob's spec.timeZone).
	// +kubebuilder:validation:MaxLength=64
	// +optional
	TimeZone string `json:"timeZone,omitempty"`

	// spendDecision is a person's answer to the namespace's request for
	// more spend (status.spendRequest) of one day: approve allows extraUSD
	// more that day and the held work flows again; reject fails the held
	// tasks of the day, and messages wait for the next day. An answer for
	// another day is ignored. Set with 'invisible-dots quota approve' or
	// 'invisible-dots quota reject'.
	// +optional
	SpendDecision *SpendDecision `json:"spendDecision,omitempty"`
}

// SpendDecision is a person's answer to a day's request for more spend.
// +kubebuilder:validation:XValidation:rule="self.decision != 'approve' || has(self.extraUSD)",message="an approval says how much more: extraUSD"
type SpendDecision struct {
	// day is the day answered (YYYY-MM-DD, in the quota's timeZone).
	// +kubebuilder:validation:Pattern=`^[0-9]{4}-[0-9]{2}-[0-9]{2}$`
	// +required
	Day string `json:"day"`
	// decision is approve or reject.
	// +required
	Decision ApprovalDecision `json:"decision"`
	// extraUSD is how much more the namespace may spend that day, beyond
	// spendPerDayUSD (approve only).
	// +kubebuilder:validation:Pattern=`^[0-9]{1,7}(\.[0-9]{1,2})?$`
	// +optional
	ExtraUSD *string `json:"extraUSD,omitempty"`
}

// SpendRequestPhase is where a day's request for more spend stands.
// +kubebuilder:validation:Enum=Pending;Approved;Rejected
type SpendRequestPhase string

const (
	SpendRequestPending  SpendRequestPhase = "Pending"
	SpendRequestApproved SpendRequestPhase = "Approved"
	SpendRequestRejected SpendRequestPhase = "Rejected"
)

// SpendRequest is the namespace's one request for more spend of a day,
// made when the day's spend reaches the cap.
type SpendRequest struct {
	// day is the day it is for (YYYY-MM-DD).
	// +required
	Day string `json:"day"`
	// phase is Pending until a person answers for that day.
	// +required
	Phase SpendRequestPhase `json:"phase"`
	// message is the question, as a person reads it: "spent $X of $Y
	// today in namespace N; allow $Z more?".
	// +optional
	Message string `json:"message,omitempty"`
	// suggestedExtraUSD is what the question offers (one more day's cap).
	// +optional
	SuggestedExtraUSD string `json:"suggestedExtraUSD,omitempty"`
	// requestID names this question (the day and what was allowed when it
	// was asked): a question asked again the same day, once what a person
	// allowed more is spent too, is another.
	// +optional
	RequestID string `json:"requestID,omitempty"`
	// dot is the Dot whose log, Inbox and channels carry the question, as
	// the Approval ApprovalName(dot, requestID) of permission
	// limits.spendPerDay: answering it answers the quota. It is the Dot of
	// the namespace's oldest held task when it was asked, else its first
	// Dot by name.
	// +optional
	Dot string `json:"dot,omitempty"`
}

// DotQuotaStatus is what the namespace uses of its caps.
type DotQuotaStatus struct {
	// activeDots counts the Dots of the namespace whose computers run
	// (started, starting or running).
	// +optional
	ActiveDots int32 `json:"activeDots"`
	// admitted is the ledger of the active-Dots cap: the Dots holding an
	// active slot. A slot is taken by writing this list over the version
	// read (two Dots starting at once cannot both take the last one) and
	// given back when the Dot's computer stops or the Dot is deleted.
	// +listType=set
	// +kubebuilder:validation:MaxItems=10000
	// +optional
	Admitted []string `json:"admitted,omitempty"`
	// day is the day the spend is counted for (YYYY-MM-DD in timeZone).
	// +optional
	Day string `json:"day,omitempty"`
	// spentTodayUSD is what the namespace's Dots spent since the day
	// began, in US dollars ("3.27").
	// +optional
	SpentTodayUSD string `json:"spentTodayUSD,omitempty"`
	// extraTodayUSD is what a person allowed beyond spendPerDayUSD today.
	// +optional
	ExtraTodayUSD string `json:"extraTodayUSD,omitempty"`
	// spendRequest is the day's request for more spend, once the day's
	// spend reached the cap: while it is Pending (or Rejected), no new task
	// or message is delivered to the namespace's Dots.
	// +optional
	SpendRequest *SpendRequest `json:"spendRequest,omitempty"`
	// observedGeneration is the generation these facts were computed for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// DotQuota is a namespace's guardrails, like a ResourceQuota: the number of
// Dots active at once and the spend per day. One per namespace, named
// default.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=dq,categories=invisible-dots
// +kubebuilder:validation:XValidation:rule="self.metadata.name == 'default'",message="a namespace has one DotQuota, named default"
// +kubebuilder:printcolumn:name="Active",type=integer,JSONPath=`.status.activeDots`
// +kubebuilder:printcolumn:name="Max Active",type=integer,JSONPath=`.spec.activeDots`
// +kubebuilder:printcolumn:name="Spent Today",type=string,JSONPath=`.status.spentTodayUSD`
// +kubebuilder:printcolumn:name="Per Day",type=string,JSONPath=`.spec.spendPerDayUSD`
// +kubebuilder:printcolumn:name="Request",type=string,JSONPath=`.status.spendRequest.phase`
// +kubebuilder:printcolumn:name="Admitted",type=string,JSONPath=`.status.admitted`,priority=10
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type DotQuota struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Spec DotQuotaSpec `json:"spec,omitempty"`
	// +optional
	Status DotQuotaStatus `json:"status,omitempty"`
}

// DotQuotaList is a list of DotQuotas.
// +kubebuilder:object:root=true
type DotQuotaList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []DotQuota `json:"items"`
}

// ActiveDotsCapReachedCondition is True when the namespace's active Dots
// are at (or, after a lowered cap, over) spec.activeDots.
const ActiveDotsCapReachedCondition = "ActiveCapReached"

// SpendCapReachedCondition is True when the namespace spent its
// spendPerDayUSD today.
const SpendCapReachedCondition = "SpendCapReached"

const (
	// UnderCapReason: the namespace is under the cap (or there is none).
	UnderCapReason = "UnderCap"
	// CapReachedReason: the cap is reached; the message says by what.
	CapReachedReason = "CapReached"
	// SpendRejectedReason: the cap is reached and a person refused more
	// for the day.
	SpendRejectedReason = "MoreRejected"
)

// HeldCondition, on a Task, says it is held PENDING by its namespace's
// daily spend cap (written by the dispatcher).
const HeldCondition = "Held"

const (
	// SpendCapHeldReason: the namespace reached its daily spend cap; the
	// task is delivered once a person allows more or the day ends.
	SpendCapHeldReason = "SpendCap"
	// NotHeldReason: nothing holds the task.
	NotHeldReason = "NotHeld"
)

// AdmittedCondition, on a Dot, says whether it holds an active slot of its
// namespace's DotQuota, or why it waits for one. Written by the power
// controller when the Dot's computer is to start.
const AdmittedCondition = "Admitted"

const (
	// AdmittedReason: the Dot holds a slot (or the namespace has no cap).
	AdmittedReason = "Admitted"
	// ActiveDotsCapReason: the namespace's active Dots are at the cap; the
	// computer is not started and the Dot's work stays queued.
	ActiveDotsCapReason = "ActiveDotsCap"
)

func (q *DotQuota) GetConditions() []metav1.Condition  { return q.Status.Conditions }
func (q *DotQuota) SetConditions(c []metav1.Condition) { q.Status.Conditions = c }

func init() {
	SchemeBuilder.Register(&DotQuota{}, &DotQuotaList{})
}
