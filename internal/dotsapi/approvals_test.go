package dotsapi

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/client"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
)

// An Approval is answered once through the Dots API: the caller needs patch
// on it, the first answer is written, and a second, the same decision
// included, or one for an Approval that no longer waits, is a 409
// already_resolved that names the answer.
func TestAnswerApproval(t *testing.T) {
	ctx := context.Background()
	e := newGuestEnv(t, guestEnvOptions{})
	for _, a := range []*dotsv1.Approval{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "runner-1"}, Spec: dotsv1.ApprovalSpec{DotName: "runner", Tool: "exec", Permission: "computer.exec"}},
		// Its task ended before anyone answered (the env's fake API server
		// keeps the status a create gives).
		{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "runner-2"}, Spec: dotsv1.ApprovalSpec{DotName: "runner", Tool: "exec", Permission: "computer.exec"},
			Status: dotsv1.ApprovalStatus{Phase: dotsv1.ApprovalExpired}},
	} {
		if err := e.client.Create(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	as := func(who string) *client.Client {
		c, err := client.New(e.restConfig(who))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	_, err := as("viewer").AnswerApproval(ctx, "team-a", "runner-1", wire.DecisionApprove, wire.ApprovalAnswer{})
	if client.StatusOf(err) != 403 || !strings.Contains(err.Error(), "may not patch approvals") {
		t.Errorf("the viewer's answer: %v; want 403 naming patch approvals", err)
	}
	got, err := as("admin").AnswerApproval(ctx, "team-a", "runner-1", wire.DecisionReject, wire.ApprovalAnswer{Note: "not now"})
	if err != nil || got != (wire.ApprovalAnswered{Namespace: "team-a", Name: "runner-1", Decision: "reject", Note: "not now"}) {
		t.Fatalf("the first answer: %+v, %v", got, err)
	}
	for _, c := range []struct {
		name, decision, want string
	}{
		{"runner-1", wire.DecisionReject, `was already answered elsewhere: reject, with the note "not now"`},
		{"runner-1", wire.DecisionApprove, "was already answered elsewhere: reject"},
		{"runner-2", wire.DecisionApprove, "no longer waits: its task ended"},
	} {
		_, err := as("admin").AnswerApproval(ctx, "team-a", c.name, c.decision, wire.ApprovalAnswer{})
		if client.StatusOf(err) != 409 || client.CodeOf(err) != wire.CodeAlreadyResolved || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %s: %v; want 409 already_resolved saying %q", c.decision, c.name, err, c.want)
		}
	}
	a := &dotsv1.Approval{}
	if err := e.client.Get(ctx, types.NamespacedName{Namespace: "team-a", Name: "runner-1"}, a); err != nil || a.Spec.Decision != dotsv1.Reject || a.Spec.Note != "not now" {
		t.Errorf("the Approval holds %+v (%v); want the first answer", a.Spec, err)
	}
	if _, err := as("admin").AnswerApproval(ctx, "team-a", "ghost", wire.DecisionApprove, wire.ApprovalAnswer{}); client.StatusOf(err) != 404 || client.CodeOf(err) != wire.CodeNotFound {
		t.Errorf("an Approval that does not exist: %v; want 404", err)
	}
}
