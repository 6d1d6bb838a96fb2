package wire

import "net/url"

// MaxApprovalAnswerBody is the largest body of POST ApprovalAnswerPath.
const MaxApprovalAnswerBody = 64 << 10

// Decisions an ApprovalAnswerPath names.
const (
	DecisionApprove = "approve"
	DecisionReject  = "reject"
)

// DecisionExpired is the decision of an approval.resolved the control plane
// logs for its own question when nobody answered it in time (a namespace's
// spend question at the end of its day): nothing was decided, and the
// question is moot.
const DecisionExpired = "expired"

// ApprovalAnswerPath is where the Approval namespace/approval is answered
// (POST, ApprovalAnswer): decision is DecisionApprove or DecisionReject.
// It writes the Approval's spec as kubectl patch would; a second answer,
// here or anywhere else, is a 409 CodeAlreadyResolved (ref 9.6).
func ApprovalAnswerPath(namespace, approval, decision string) string {
	return Prefix + "namespaces/" + url.PathEscape(namespace) + "/approvals/" + url.PathEscape(approval) + "/" + decision
}

// ApprovalAnswer is the body of POST ApprovalAnswerPath, which may be
// empty: the person's note for the Dot, and, approving, always (the
// Approval's permission is set to allow in the Dot's spec).
type ApprovalAnswer struct {
	Note   string `json:"note,omitempty"`
	Always bool   `json:"always,omitempty"`
	// AlwaysFor bounds an always: 1h or endOfDay; empty is for ever.
	AlwaysFor string `json:"alwaysFor,omitempty"`
	// Scope "task" allows the permission for the rest of the task when the
	// call was asked because the Dot read untrusted input.
	Scope string `json:"scope,omitempty"`
}

// The values of ApprovalAnswer's alwaysFor and scope.
const (
	AlwaysForHour     = "1h"
	AlwaysForEndOfDay = "endOfDay"
	ScopeTask         = "task"
)

// ApprovalAnswered answers POST ApprovalAnswerPath: the answer as the
// Approval now holds it.
type ApprovalAnswered struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Decision  string `json:"decision"`
	Note      string `json:"note,omitempty"`
	Always    bool   `json:"always,omitempty"`
}
