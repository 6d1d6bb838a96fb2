// Package approvalonce is an admission plugin of the embedded API server
// that keeps an Approval answered once (ref 9.6): an update of an Approval
// whose decision is set that changes its decision, note or always (another
// answer, the same decision with other words, or the decision taken back)
// is refused as a 409 Conflict whose message starts with already_resolved,
// the Dots API's code for it, and says what the answer was. kubectl patch,
// the command line and the web client all write decisions through the
// resource API, so this is the one place that says it for all of them.
//
// The same decision again with nothing else changed is let through: it is
// the Approval as it is, and admission cannot tell such a write from an
// unrelated one (a label, an owner reference, a finalizer) since it sees
// objects, not the request's patch. The API server stores nothing for it
// (kubectl says "patched (no change)") and the answer that counts is the
// first. The command line and the web client read the Approval first and
// write over the version they read, so a second answer of theirs is the 409
// even when it is the same decision.
//
// The check runs when the mutating plugins run, before the schema's
// validation: the CRD keeps its CEL rule that a decision cannot change
// (which is what a cluster without this plugin answers, a 422), and this
// plugin's 409 is what is seen first. It runs again with the validating
// plugins, on the object as it is to be stored.
package approvalonce

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
)

// Name is the plugin's name in the server's admission chain.
const Name = "InvisibleDotsApprovalAnsweredOnce"

// Plugin is the admission plugin.
type Plugin struct {
	*admission.Handler
}

var (
	_ admission.MutationInterface   = (*Plugin)(nil)
	_ admission.ValidationInterface = (*Plugin)(nil)
)

// New returns the plugin.
func New() *Plugin { return &Plugin{Handler: admission.NewHandler(admission.Update)} }

// Factory registers the plugin with an admission.Plugins.
func (p *Plugin) Factory(io.Reader) (admission.Interface, error) { return p, nil }

var approvals = dotsv1.GroupVersion.WithResource("approvals").GroupResource()

// Admit refuses a second answer before the schema's rules are asked; it
// changes nothing.
func (p *Plugin) Admit(_ context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	return check(a)
}

// Validate refuses a second answer, on the object as it is to be stored.
func (p *Plugin) Validate(_ context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	return check(a)
}

func check(a admission.Attributes) error {
	if a.GetOperation() != admission.Update || a.GetResource().GroupResource() != approvals || a.GetSubresource() != "" {
		return nil
	}
	old, ok := answerOf(a.GetOldObject())
	if !ok || old.Decision == "" {
		return nil
	}
	now, ok := answerOf(a.GetObject())
	if !ok || now == old {
		return nil
	}
	name := a.GetName()
	if ns := a.GetNamespace(); ns != "" {
		name = ns + "/" + name
	}
	return Refusal(a.GetName(), fmt.Sprintf("Approval %s was already answered elsewhere: %s; an approval is answered once (a new question from the Dot is a new Approval)",
		name, Answered(a.GetOldObject())))
}

// EndedWhy says why an Expired Approval no longer waits: its task ended
// before anyone answered, or, for a namespace's question for more spend,
// its day.
func EndedWhy(a *dotsv1.Approval) string {
	if a.Spec.Permission == protocol.SpendPermission {
		return "its day ended"
	}
	return "its task ended"
}

// Answered says an answered Approval's answer as a person reads it: the
// decision, always, the note, and who wrote it when its managed fields
// say so.
func Answered(obj runtime.Object) string {
	w, _ := answerOf(obj)
	return w.words() + by(obj)
}

// Refusal is the 409 of a second answer to the Approval name: a Conflict
// whose message is wire.CodeAlreadyResolved, a colon and why, and whose
// cause has the code as its type.
func Refusal(name, why string) *apierrors.StatusError {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusConflict,
		Reason:  metav1.StatusReasonConflict,
		Message: wire.CodeAlreadyResolved + ": " + why,
		Details: &metav1.StatusDetails{
			Group: approvals.Group, Kind: approvals.Resource, Name: name,
			Causes: []metav1.StatusCause{{Type: metav1.CauseType(wire.CodeAlreadyResolved), Field: "spec.decision", Message: why}},
		},
	}}
}

// IsAlreadyResolved reports whether err is the API server's answer to a
// second answer (the 409 of this plugin).
func IsAlreadyResolved(err error) bool {
	var s apierrors.APIStatus
	if !errors.As(err, &s) {
		return false
	}
	st := s.Status()
	if st.Code != http.StatusConflict {
		return false
	}
	if strings.HasPrefix(st.Message, wire.CodeAlreadyResolved+":") {
		return true
	}
	if st.Details != nil {
		for _, c := range st.Details.Causes {
			if string(c.Type) == wire.CodeAlreadyResolved {
				return true
			}
		}
	}
	return false
}

// answer is what a person sets on an Approval.
type answer struct {
	Decision dotsv1.ApprovalDecision
	Note     string
	Always   bool
	// AlwaysFor and Scope are the guardrails' parts of an answer (how long
	// an always lasts; allowed for the rest of the task).
	AlwaysFor string
	Scope     string
}

// words says an answer as a person reads it.
func (w answer) words() string {
	s := string(w.Decision)
	switch {
	case w.Decision == dotsv1.Approve && w.Always:
		s = "approve, always (the permission is allowed from now on)"
	case w.Always:
		s += ", always"
	}
	switch {
	case w.Always && w.AlwaysFor == "1h":
		s = strings.Replace(s, "from now on", "for an hour", 1)
	case w.Always && w.AlwaysFor == "endOfDay":
		s = strings.Replace(s, "from now on", "until the end of the day", 1)
	}
	if w.Scope == "task" {
		s += ", for the rest of the task"
	}
	if w.Note != "" {
		note := w.Note
		if r := []rune(note); len(r) > 200 {
			note = string(r[:200]) + "…"
		}
		s += fmt.Sprintf(", with the note %q", note)
	}
	return s
}

// answerOf reads the answer of an Approval, as the API server hands it to
// admission (unstructured, a custom resource) or typed.
func answerOf(obj runtime.Object) (answer, bool) {
	switch o := obj.(type) {
	case *unstructured.Unstructured:
		d, _, _ := unstructured.NestedString(o.Object, "spec", "decision")
		n, _, _ := unstructured.NestedString(o.Object, "spec", "note")
		al, _, _ := unstructured.NestedBool(o.Object, "spec", "always")
		af, _, _ := unstructured.NestedString(o.Object, "spec", "alwaysFor")
		sc, _, _ := unstructured.NestedString(o.Object, "spec", "scope")
		return answer{Decision: dotsv1.ApprovalDecision(d), Note: n, Always: al, AlwaysFor: af, Scope: sc}, true
	case *dotsv1.Approval:
		return answer{Decision: o.Spec.Decision, Note: o.Spec.Note, Always: o.Spec.Always, AlwaysFor: o.Spec.AlwaysFor, Scope: o.Spec.Scope}, true
	}
	return answer{}, false
}

// by names, when the object's managed fields say it, the field manager that
// wrote the decision (kubectl-patch, the command line's, the web client's)
// and when.
func by(obj runtime.Object) string {
	m, err := meta.Accessor(obj)
	if err != nil {
		return ""
	}
	for _, f := range m.GetManagedFields() {
		if f.FieldsV1 == nil {
			continue
		}
		var fields struct {
			Spec map[string]json.RawMessage `json:"f:spec"`
		}
		if json.Unmarshal(f.FieldsV1.Raw, &fields) != nil {
			continue
		}
		if _, ok := fields.Spec["f:decision"]; !ok || f.Manager == "" {
			continue
		}
		s := " (by " + f.Manager
		if f.Time != nil {
			s += " at " + f.Time.UTC().Format("2006-01-02 15:04:05 UTC")
		}
		return s + ")"
	}
	return ""
}
