package cli

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/internal/approvalonce"
	"github.com/invisible-dots/invisible-dots/internal/scheme"
)

func approvalNamed(name string, decision dotsv1.ApprovalDecision, phase dotsv1.ApprovalPhase) *dotsv1.Approval {
	a := &dotsv1.Approval{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec:       dotsv1.ApprovalSpec{DotName: "helper", Tool: "exec", Permission: "computer.exec", Decision: decision, Note: "not now"},
		Status:     dotsv1.ApprovalStatus{Phase: phase},
	}
	return a
}

// A second answer from the command line says what the first was and exits
// ExitAlreadyAnswered, whether it read the answer or met the API server's
// 409 already_resolved; the first answer is written and printed.
func TestDecideAnswersOnce(t *testing.T) {
	ctx := context.Background()
	patches := 0
	kube := fake.NewClientBuilder().WithScheme(scheme.Scheme).
		WithStatusSubresource(&dotsv1.Approval{}).
		WithObjects(
			approvalNamed("waiting", "", dotsv1.ApprovalPending),
			approvalNamed("answered", dotsv1.Reject, dotsv1.ApprovalRejected),
			approvalNamed("expired", "", dotsv1.ApprovalExpired),
			approvalNamed("raced", "", dotsv1.ApprovalPending),
		).
		WithInterceptorFuncs(interceptor.Funcs{Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
			patches++
			if obj.GetName() == "raced" {
				// Answered in the web client between the read and the write.
				return approvalonce.Refusal("raced", "Approval default/raced was already answered elsewhere: approve (by Mozilla at 2026-12-04 20:01:02 UTC); an approval is answered once")
			}
			return c.Patch(ctx, obj, p, opts...)
		}}).Build()
	c := &clients{kube: kube, ns: "default"}

	var out bytes.Buffer
	if err := decide(ctx, c, "waiting", dotsv1.Approve, true, "", &out); err != nil {
		t.Fatalf("the first answer: %v", err)
	}
	if out.String() != "approval waiting: approve\n" {
		t.Errorf("printed %q", out.String())
	}
	got := &dotsv1.Approval{}
	if err := kube.Get(ctx, client.ObjectKey{Namespace: "default", Name: "waiting"}, got); err != nil || got.Spec.Decision != dotsv1.Approve || !got.Spec.Always {
		t.Errorf("the first answer is not written: %+v %v", got.Spec, err)
	}

	for _, c2 := range []struct {
		name, decision string
		want           []string
	}{
		{"answered", "approve", []string{"approval answered was already answered: reject", `with the note "not now"`, "nothing was changed"}},
		{"answered", "reject", []string{"already answered: reject"}},
		{"expired", "approve", []string{"no longer waits", "Expired"}},
		{"raced", "approve", []string{"already answered elsewhere: approve (by Mozilla"}},
	} {
		patches = 0
		out.Reset()
		err := decide(ctx, c, c2.name, dotsv1.ApprovalDecision(c2.decision), false, "", &out)
		var coded *exitError
		if !errors.As(err, &coded) || coded.ExitCode() != ExitAlreadyAnswered {
			t.Errorf("%s %s: %v; want exit code %d", c2.decision, c2.name, err, ExitAlreadyAnswered)
			continue
		}
		for _, w := range c2.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s %s: %q does not say %q", c2.decision, c2.name, err, w)
			}
		}
		if strings.HasPrefix(err.Error(), "already_resolved") {
			t.Errorf("%s %s: %q starts with the wire code, not words", c2.decision, c2.name, err)
		}
		if c2.name == "raced" && patches != 1 {
			t.Errorf("the 409 already_resolved was tried %d times; want once", patches)
		}
		if out.Len() != 0 {
			t.Errorf("%s %s printed %q", c2.decision, c2.name, out.String())
		}
	}
	if ExitAlreadyAnswered == 1 || ExitAlreadyAnswered == 2 {
		t.Error("the exit code is another failure's (1) or doctor's warning (2)")
	}
}
