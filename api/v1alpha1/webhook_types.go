package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// WebhookSignature is how a Webhook's sender proves a delivery is theirs.
// +kubebuilder:validation:Enum=github;standard;token
type WebhookSignature string

const (
	// WebhookGitHub: HMAC-SHA256 of the body in X-Hub-Signature-256
	// ("sha256=<hex>"), the delivery's id in X-GitHub-Delivery.
	WebhookGitHub WebhookSignature = "github"
	// WebhookStandard: the Standard Webhooks scheme (webhook-id,
	// webhook-timestamp, webhook-signature "v1,<base64>"), with a replay
	// window of five minutes.
	WebhookStandard WebhookSignature = "standard"
	// WebhookToken: "Authorization: Bearer <secret>", for senders that can
	// sign nothing. Weaker: anyone who sees one request can send more.
	WebhookToken WebhookSignature = "token"
)

// WebhookTaskTemplate is the Task a delivery makes.
type WebhookTaskTemplate struct {
	// description is the Task's description, with the payload's fields
	// substituted: {{.pull_request.title}} is the field title of the
	// object pull_request of the JSON body (the syntax is in the README).
	// The substituted values are marked, in the Task, as coming from an
	// untrusted sender.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=20000
	// +kubebuilder:validation:XValidation:rule="!self.contains('\\u0000')",message="holds a NUL character (U+0000), which cannot be stored: remove it"
	// +required
	Description string `json:"description"`

	// priority is the Task's priority: higher runs first.
	// +kubebuilder:validation:Minimum=-100
	// +kubebuilder:validation:Maximum=100
	// +optional
	Priority int32 `json:"priority,omitempty"`
}

// WebhookSecretRef names the Secret, in the Webhook's namespace, that holds
// the signing secret (or the token).
type WebhookSecretRef struct {
	// name is the Secret's name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`
	// key is the key of the secret in the Secret's data.
	// +kubebuilder:default=secret
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Key string `json:"key,omitempty"`
}

// SecretKey is the key of the secret in the Secret (WebhookSecretKey when
// unset).
func (r WebhookSecretRef) SecretKey() string {
	if r.Key == "" {
		return WebhookSecretKey
	}
	return r.Key
}

// WebhookSpec is a signed door that makes Tasks for a Dot.
type WebhookSpec struct {
	// dotName is the Dot the Tasks are for, in the same namespace.
	// +kubebuilder:validation:Pattern=`^[a-z0-9-]{1,40}$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="dotName cannot change; make a new Webhook"
	// +required
	DotName string `json:"dotName"`

	// signature is how deliveries are proven: github, standard or token.
	// +required
	Signature WebhookSignature `json:"signature"`

	// secretRef names the Secret of the signing secret. For standard, the
	// secret is "whsec_" and the base64 of the key, as Standard Webhooks
	// senders show it.
	// +required
	SecretRef WebhookSecretRef `json:"secretRef"`

	// task is the Task each delivery makes.
	// +required
	Task WebhookTaskTemplate `json:"task"`

	// paused refuses every delivery (as an unknown Webhook: 401) while true.
	// +optional
	Paused bool `json:"paused,omitempty"`
}

// WebhookStatus is what the listener observed of the deliveries. The
// counts are written in batches (at most once a second), so they lag by
// that much.
type WebhookStatus struct {
	// lastDeliveryTime is when the last delivery was accepted.
	// +optional
	LastDeliveryTime *metav1.Time `json:"lastDeliveryTime,omitempty"`
	// lastTaskName is the Task the last accepted delivery made (or found,
	// for a delivery sent again).
	// +optional
	LastTaskName string `json:"lastTaskName,omitempty"`
	// accepted counts deliveries that made a Task.
	// +optional
	Accepted int64 `json:"accepted,omitempty"`
	// duplicates counts deliveries whose id had made a Task already
	// (a sender's retry): answered with that Task, none made.
	// +optional
	Duplicates int64 `json:"duplicates,omitempty"`
	// refused counts deliveries refused: a bad signature, a timestamp out
	// of the replay window, a body too large, over the rate limit, while
	// paused, or a Task that could not be made.
	// +optional
	Refused int64 `json:"refused,omitempty"`
	// lastError says why the last refused delivery was refused (never
	// holding the secret or the body).
	// +kubebuilder:validation:MaxLength=300
	// +optional
	LastError string `json:"lastError,omitempty"`
	// lastErrorTime is when.
	// +optional
	LastErrorTime *metav1.Time `json:"lastErrorTime,omitempty"`
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Webhook is a signed door through which a program (GitHub, a CI, a form)
// hands its Dot work: each delivery it signs makes one Task. It is served
// on the server's hooks listener (INVISIBLE_DOTS_HOOKS_LISTEN, off by
// default) at POST /hooks/v1/{namespace}/{name}.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=hook,categories=invisible-dots
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z0-9-]{1,40}$')",message="a Webhook's name is 1 to 40 characters of a-z, 0-9 and -"
// +kubebuilder:printcolumn:name="Dot",type=string,JSONPath=`.spec.dotName`
// +kubebuilder:printcolumn:name="Signature",type=string,JSONPath=`.spec.signature`
// +kubebuilder:printcolumn:name="Paused",type=boolean,JSONPath=`.spec.paused`
// +kubebuilder:printcolumn:name="Accepted",type=integer,JSONPath=`.status.accepted`
// +kubebuilder:printcolumn:name="Refused",type=integer,JSONPath=`.status.refused`
// +kubebuilder:printcolumn:name="Last Delivery",type=date,JSONPath=`.status.lastDeliveryTime`
// +kubebuilder:printcolumn:name="Last Error",type=string,JSONPath=`.status.lastError`,priority=10
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Webhook struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec WebhookSpec `json:"spec"`
	// +optional
	Status WebhookStatus `json:"status,omitempty"`
}

// WebhookList is a list of Webhooks.
// +kubebuilder:object:root=true
type WebhookList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Webhook `json:"items"`
}

// WebhookSecretKey is the key of a Webhook's secret in its Secret.
const WebhookSecretKey = "secret"

// WebhookSecretName is the name of the Secret the command line makes for
// the Webhook name (owned by it, gone with it).
func WebhookSecretName(webhook string) string { return webhook + "-webhook" }

// WebhookSecretRotatedAnnotation is when the Webhook's secret was last
// rotated (RFC 3339), written after the new secret is stored: the listener
// reads the secret again as soon as it sees it change, so the old secret is
// refused at once. A Secret changed without it is read again within 10 s.
const WebhookSecretRotatedAnnotation = "dots.invisible.dev/secret-rotated-at"

// WebhookLabel labels a Task a Webhook made with the Webhook's name.
const WebhookLabel = "dots.invisible.dev/webhook"

func (w *Webhook) GetConditions() []metav1.Condition  { return w.Status.Conditions }
func (w *Webhook) SetConditions(c []metav1.Condition) { w.Status.Conditions = c }

func init() {
	SchemeBuilder.Register(&Webhook{}, &WebhookList{})
}
