package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ChannelType is the messaging service a Channel links a Dot to.
// +kubebuilder:validation:Enum=telegram;whatsapp
type ChannelType string

const (
	ChannelTelegram ChannelType = "telegram"
	ChannelWhatsApp ChannelType = "whatsapp"
)

// ChannelSettings are what a Channel does besides carrying a conversation.
type ChannelSettings struct {
	// approvals sends the Dot's approval requests to every owner's chat,
	// answered there by button (Telegram) or in words (WhatsApp). An
	// approval over a chat is as strong as the person's account on the
	// service; off keeps answers in the web client and the command line.
	// +kubebuilder:default=true
	// +optional
	Approvals *bool `json:"approvals,omitempty"`

	// notifyTasks sends a task's end, and an answer that answers no
	// message (an automation's), to every owner's chat.
	// +kubebuilder:default=true
	// +optional
	NotifyTasks *bool `json:"notifyTasks,omitempty"`

	// showArguments puts a call's arguments (cut to 300 characters) in an
	// approval prompt; they can hold private data, and the service reads
	// the chat.
	// +kubebuilder:default=true
	// +optional
	ShowArguments *bool `json:"showArguments,omitempty"`
}

// ApprovalsOn, NotifyTasksOn and ShowArgumentsOn read a setting, true
// when unset (the defaults the schema writes).
func (s ChannelSettings) ApprovalsOn() bool     { return s.Approvals == nil || *s.Approvals }
func (s ChannelSettings) NotifyTasksOn() bool   { return s.NotifyTasks == nil || *s.NotifyTasks }
func (s ChannelSettings) ShowArgumentsOn() bool { return s.ShowArguments == nil || *s.ShowArguments }

// ChannelSpec links a Dot to an account on a messaging service (ref 9.8).
// Its credentials are in the Secret credentialsSecretName names, which the
// Channel owns; they are never returned by an API and never reach the guest.
type ChannelSpec struct {
	// dotName is the Dot people talk to through this Channel, in the same
	// namespace.
	// +kubebuilder:validation:Pattern=`^[a-z0-9-]{1,40}$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="dotName cannot change; make a new Channel"
	// +required
	DotName string `json:"dotName"`

	// type is the messaging service.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="type cannot change; make a new Channel"
	// +required
	Type ChannelType `json:"type"`

	// enabled runs the Channel; false pauses it (nothing is read from or
	// sent to the service; what the Dot says meanwhile is sent when it is
	// enabled again).
	// +kubebuilder:default=true
	// +optional
	Enabled *bool `json:"enabled,omitempty"`

	// credentialsSecretName is the Secret, in the same namespace, holding
	// the account's credentials (Telegram: the bot's token under "token").
	// Empty for a service linked by scanning a code (WhatsApp), whose keys
	// the control plane writes itself.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	CredentialsSecretName string `json:"credentialsSecretName,omitempty"`

	// +optional
	Settings ChannelSettings `json:"settings,omitempty"`
}

// IsEnabled says whether the Channel runs (true when unset).
func (s ChannelSpec) IsEnabled() bool { return s.Enabled == nil || *s.Enabled }

// ChannelState is where a Channel's link stands.
// +kubebuilder:validation:Enum=connecting;connected;needs_relink;error;paused
type ChannelState string

const (
	ChannelConnecting  ChannelState = "connecting"
	ChannelConnected   ChannelState = "connected"
	ChannelNeedsRelink ChannelState = "needs_relink"
	ChannelError       ChannelState = "error"
	ChannelPaused      ChannelState = "paused"
)

// ChannelAccount is the service's account the Channel speaks as.
type ChannelAccount struct {
	// id is the service's stable id of the account (a bot's user id).
	ID string `json:"id"`
	// name is its public name (a bot's username, a phone number).
	// +optional
	Name string `json:"name,omitempty"`
}

// ChannelPerson is a person paired with the Channel.
type ChannelPerson struct {
	// id is the person's stable id on the service (a Telegram user id).
	ID string `json:"id"`
	// label is how they call themselves on the service, for this list only.
	// +optional
	Label string `json:"label,omitempty"`
	// role is what they may do: owner (talk, get task endings, answer
	// approvals).
	Role string `json:"role"`
	// pairedAt is when they paired.
	PairedAt metav1.Time `json:"pairedAt"`
}

// ChannelStatus is what the control plane observed of the link.
type ChannelStatus struct {
	// +optional
	State ChannelState `json:"state,omitempty"`
	// detail says why, for a state other than connected (cut to 300
	// characters, never holding a credential).
	// +optional
	Detail string `json:"detail,omitempty"`
	// +optional
	Account *ChannelAccount `json:"account,omitempty"`
	// people are the people paired (kept in the control plane's database;
	// this is a copy to read).
	// +listType=map
	// +listMapKey=id
	// +kubebuilder:validation:MaxItems=256
	// +optional
	People []ChannelPerson `json:"people,omitempty"`
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Channel links a Dot to Telegram or WhatsApp, so people talk to it, and
// answer its approvals, from the chat app on their phone.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=chan,categories=invisible-dots
// +kubebuilder:printcolumn:name="Dot",type=string,JSONPath=`.spec.dotName`
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.spec.type`
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="Account",type=string,JSONPath=`.status.account.name`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Channel struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec ChannelSpec `json:"spec"`
	// +optional
	Status ChannelStatus `json:"status,omitempty"`
}

// ChannelList is a list of Channels.
// +kubebuilder:object:root=true
type ChannelList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Channel `json:"items"`
}

// The names the control plane gives a Dot's Channel and its Secrets: one
// place, which the Dots API, the controllers and the command line read.

// ChannelName is the name of the Dot's Channel of type typ.
func ChannelName(dot string, typ ChannelType) string { return dot + "-" + string(typ) }

// ChannelCredentialsSecretName is the Secret of the Channel's token.
func ChannelCredentialsSecretName(channel string) string { return channel + "-credentials" }

// ChannelDeviceSecretName is the Secret of the Channel's linked device
// (WhatsApp): its identity and Signal keys, an account takeover if they
// leak, so a Secret (encrypted at rest by the API server, never returned by
// a route, never sent to a guest) owned by the Channel, gone with it.
func ChannelDeviceSecretName(channel string) string { return channel + "-device" }

// ChannelAccountValue is the ChannelAccountLabel of the account id of a
// service of type typ.
func ChannelAccountValue(typ ChannelType, id string) string { return string(typ) + "-" + id }

// ChannelAccountLabel labels a Channel with its account (type and id), so
// the one Channel of an account is found without listing them all: a bot
// serves one Dot.
const ChannelAccountLabel = "dots.invisible.dev/channel-account"

// ChannelFinalizer holds a deleted Channel until the hub stopped its link
// and forgot its people, pairing codes and cursor.
const ChannelFinalizer = "dots.invisible.dev/channel"

// ChannelPeopleChangedAnnotation is written on a Channel when its people
// change outside its controller (a person unpaired through the Dots API),
// so the controller copies them to the status again.
const ChannelPeopleChangedAnnotation = "dots.invisible.dev/people-changed"

// ChannelCredentialsAnnotation is when the Channel's credentials were last
// given (RFC 3339): a link stopped for a relink starts again when they are
// given again, even the same token.
const ChannelCredentialsAnnotation = "dots.invisible.dev/credentials-given-at"

// ChannelCredentialsKey is the key of a Telegram bot's token in its Secret.
const ChannelCredentialsKey = "token"

func init() {
	SchemeBuilder.Register(&Channel{}, &ChannelList{})
}
