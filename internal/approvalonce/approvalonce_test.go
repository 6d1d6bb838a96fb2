package approvalonce

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
)

func approval(spec map[string]any) *unstructured.Unstructured {
	s := map[string]any{"dotName": "helper", "tool": "exec", "permission": "computer.exec"}
	for k, v := range spec {
		s[k] = v
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": dotsv1.GroupVersion.String(), "kind": "Approval",
		"metadata": map[string]any{"name": "helper-1", "namespace": "default"},
		"spec":     s,
	}}
}

func update(obj, old runtime.Object, resource, sub string) admission.Attributes {
	gvr := dotsv1.GroupVersion.WithResource(resource)
	return admission.NewAttributesRecord(obj, old, gvr.GroupVersion().WithKind("Approval"), "default", "helper-1", gvr, sub, admission.Update, &metav1.PatchOptions{}, false, &user.DefaultInfo{Name: "someone"})
}

func TestAnsweredOnce(t *testing.T) {
	p := New()
	ctx := context.Background()
	pending := approval(nil)
	approved := approval(map[string]any{"decision": "approve"})
	at := metav1.NewTime(time.Date(2026, 12, 4, 20, 1, 2, 0, time.UTC))
	approved.SetManagedFields([]metav1.ManagedFieldsEntry{
		{Manager: "invisible-dots-controllers", Operation: metav1.ManagedFieldsOperationUpdate, FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:ownerReferences":{}}}`)}},
		{Manager: "kubectl-patch", Operation: metav1.ManagedFieldsOperationUpdate, Time: &at, FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{"f:decision":{}}}`)}},
	})
	labelled := approved.DeepCopy()
	labelled.SetLabels(map[string]string{"team": "a"})
	for _, c := range []struct {
		name    string
		a       admission.Attributes
		refused bool
	}{
		{"the first answer", update(approval(map[string]any{"decision": "reject", "note": "no"}), pending, "approvals", ""), false},
		{"the first answer, always", update(approval(map[string]any{"decision": "approve", "always": true}), pending, "approvals", ""), false},
		{"another decision", update(approval(map[string]any{"decision": "reject"}), approved, "approvals", ""), true},
		{"the decision taken back", update(approval(nil), approved, "approvals", ""), true},
		{"the same decision with a note", update(approval(map[string]any{"decision": "approve", "note": "go"}), approved, "approvals", ""), true},
		{"the same decision, always", update(approval(map[string]any{"decision": "approve", "always": true}), approved, "approvals", ""), true},
		// Not to be told from a write of its labels or owner: the
		// Approval as it is, stored as no change.
		{"the same decision, nothing else", update(approved.DeepCopy(), approved, "approvals", ""), false},
		{"a label on an answered Approval", update(labelled, approved, "approvals", ""), false},
		{"its status written", update(approval(map[string]any{"decision": "reject"}), approved, "approvals", "status"), false},
		{"another kind", update(approval(map[string]any{"decision": "reject"}), approved, "tasks", ""), false},
	} {
		for phase, run := range map[string]func(context.Context, admission.Attributes, admission.ObjectInterfaces) error{"admit": p.Admit, "validate": p.Validate} {
			err := run(ctx, c.a, nil)
			if !c.refused {
				if err != nil {
					t.Errorf("%s (%s): refused: %v", c.name, phase, err)
				}
				continue
			}
			if !apierrors.IsConflict(err) || !IsAlreadyResolved(err) {
				t.Errorf("%s (%s): %v; want a 409 already_resolved", c.name, phase, err)
				continue
			}
			st := err.(apierrors.APIStatus).Status()
			if st.Code != http.StatusConflict || st.Reason != metav1.StatusReasonConflict {
				t.Errorf("%s (%s): code %d reason %s; want 409 Conflict", c.name, phase, st.Code, st.Reason)
			}
			for _, want := range []string{"already_resolved: ", "Approval default/helper-1", "answered elsewhere", "by kubectl-patch at 2026-12-04 20:01:02 UTC", ": approve"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("%s (%s): %q does not say %q", c.name, phase, err, want)
				}
			}
			if !strings.HasPrefix(st.Message, "already_resolved: ") {
				t.Errorf("%s (%s): message %q does not start with the code", c.name, phase, st.Message)
			}
		}
	}
	if !p.Handles(admission.Update) || p.Handles(admission.Create) || p.Handles(admission.Delete) {
		t.Error("the plugin handles updates only")
	}
}

func TestWords(t *testing.T) {
	for _, c := range []struct {
		a    answer
		want string
	}{
		{answer{Decision: dotsv1.Reject, Note: "not the home"}, `reject, with the note "not the home"`},
		{answer{Decision: dotsv1.Approve, Always: true}, "approve, always (the permission is allowed from now on)"},
		{answer{Decision: dotsv1.Approve}, "approve"},
	} {
		if got := c.a.words(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.a, got, c.want)
		}
	}
}

func TestIsAlreadyResolved(t *testing.T) {
	if !IsAlreadyResolved(Refusal("x", "answered")) {
		t.Error("the plugin's refusal is not already_resolved")
	}
	if IsAlreadyResolved(apierrors.NewConflict(schema.GroupResource{Group: dotsv1.GroupVersion.Group, Resource: "approvals"}, "x", nil)) {
		t.Error("a stale resourceVersion's Conflict is not already_resolved")
	}
	if IsAlreadyResolved(nil) {
		t.Error("nil is not already_resolved")
	}
}
