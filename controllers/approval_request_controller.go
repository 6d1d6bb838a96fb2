package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
	"github.com/invisible-dots/invisible-dots/internal/lifecycle"
	"github.com/invisible-dots/invisible-dots/internal/lifecycle/projection"
	"github.com/invisible-dots/invisible-dots/internal/patch"
	"github.com/invisible-dots/invisible-dots/internal/store"
)

// ApprovalRequestControllerName names the reconciler of the approvals a
// Dot's guest asks for.
const ApprovalRequestControllerName = "approval-request-controller"

// approvalRequestWriter writes the phase of an Approval the guest asked for
// until a person decides it (Pending, or Expired when its task ended):
// lifecycle.RequestedApprovalPhase. No conditions; a decided phase and
// decidedAt are the Approval reconciler's.
var approvalRequestWriter = patch.Writer{Name: ApprovalRequestControllerName}

// ApprovalRequestReconciler answers what a Dot's guest asks a person,
// keyed by Dot: it makes an Approval for each request of the log, expires
// those whose task ended without a decision, and delivers a person's
// decision to the guest (approval.resolved in the log, approval.received in
// the outbox, in one transaction); an "always" approval first sets the
// permission to allow in the Dot's spec, with its own field manager.
type ApprovalRequestReconciler struct {
	Client   client.Client
	Log      *WorkLog
	Recorder recorder.EventRecorder
}

// SetupWithManager registers the reconciler: a Dot, its Tasks and
// Approvals, and new events in its log wake it.
func (r *ApprovalRequestReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return setUpWork(mgr, r.Log, ApprovalRequestControllerName, workWatch{tasks: true, approvals: true}, r)
}

// Reconcile delivers the decisions made, then makes and expires the
// Approvals the log asks for.
func (r *ApprovalRequestReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	in, err := openWork(ctx, r.Client, r.Log, req, true, true)
	if in == nil || err != nil {
		return ctrl.Result{}, err
	}
	defer in.Close()

	steps := &workSteps{}
	for i := range in.Approvals {
		steps.run("deliver the decision of approval "+in.Approvals[i].Name, r.answer(ctx, &in.Approvals[i], in.DotWork))
	}
	steps.run("make the approvals asked for", r.makeApprovals(ctx, in.Dot, in.View(), in.Tasks, in.Approvals))
	return steps.result(ctx, r.Recorder, in.Dot, ctrl.Result{})
}

// alwaysManager is the field manager of the permissions an "always allow"
// sets: a GitOps apply of another value then meets a conflict instead of
// silently taking it back.
const alwaysManager = "invisible-dots-always-allow"

// allowAlways sets the Approval's permission to allow in the Dot's spec,
// with its own field manager (server-side apply, forced: the person's
// decision wins over the value applied before it).
func (r *ApprovalRequestReconciler) allowAlways(ctx context.Context, a *dotsv1.Approval) error {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": dotsv1.GroupVersion.String(),
		"kind":       "Dot",
		"metadata":   map[string]any{"name": a.Spec.DotName, "namespace": a.Namespace},
		"spec":       map[string]any{"permissions": map[string]any{a.Spec.Permission: "allow"}},
	}}
	from := time.Now()
	if a.Status.DecidedAt != nil {
		from = a.Status.DecidedAt.Time // the same end on every retry
	}
	if until, ok := alwaysUntil(a.Spec.AlwaysFor, from); ok {
		// An allow for a while: the end goes with it, and the guest asks
		// again from then on.
		u.Object["spec"].(map[string]any)["allowUntil"] = map[string]any{a.Spec.Permission: until.UTC().Format(time.RFC3339)}
	}
	if err := r.Client.Patch(ctx, u, client.Apply, client.FieldOwner(alwaysManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("set %s to allow in Dot %s: %w", a.Spec.Permission, a.Spec.DotName, err)
	}
	return nil
}

// answer delivers a person's decision on an Approval the guest asked for:
// approval.resolved in the log and approval.received in the outbox. An
// "always" approval first sets the permission to allow in the Dot's spec
// (the guest link pushes the new config), logged as dot.updated.
func (r *ApprovalRequestReconciler) answer(ctx context.Context, a *dotsv1.Approval, w *DotWork) error {
	if a.Spec.Decision == "" || a.Spec.RequestID == "" {
		return nil
	}
	if a.Spec.Permission == protocol.SpendPermission {
		return r.answerSpend(ctx, a, w)
	}
	// A budget approval (limits.cost) is for its task only: there is no
	// permission to set.
	if a.Spec.Decision == dotsv1.Approve && a.Spec.Always && a.Spec.Permission != "" && !protocol.OneTimePermission(a.Spec.Permission) {
		if err := r.allowAlways(ctx, a); err != nil {
			return err
		}
	}
	msg := protocol.ApprovalReceived{ApprovalID: a.Spec.RequestID, Decision: protocol.ApprovalDecision(a.Spec.Decision)}
	if a.Spec.Decision == dotsv1.Approve && a.Spec.Scope == "task" {
		msg.Scope = ptr.To(protocol.ApprovalScopeTask)
	}
	if a.Spec.Note != "" {
		msg.Note = ptr.To(a.Spec.Note)
	}
	body, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	id := w.id
	fields := map[string]any{"approval_id": a.Spec.RequestID, "approval": a.Name, "decision": a.Spec.Decision, "always": a.Spec.Always}
	if a.Spec.AlwaysFor != "" {
		fields["always_for"] = a.Spec.AlwaysFor
	}
	if a.Spec.Scope != "" {
		fields["scope"] = a.Spec.Scope
	}
	logged, _ := json.Marshal(fields)
	return w.Decide(ctx, &store.Inbound{ID: store.ApprovalDecisionID(string(a.UID)), Dot: id, Type: protocol.InboundApprovalReceived, Data: body},
		store.Event{Dot: id, Type: wire.EventApprovalResolved, Source: store.SourceHost, Data: logged})
}

// answerSpend carries a person's answer to the namespace's question for
// more spend (asked by the quota reconciler in this Dot's log) into the
// DotQuota, when it is still the quota's pending question and not answered
// there already; then logs approval.resolved once. Nothing goes to the
// guest, which never asked.
func (r *ApprovalRequestReconciler) answerSpend(ctx context.Context, a *dotsv1.Approval, w *DotWork) error {
	if av, ok := w.View().Approvals[a.Spec.RequestID]; !ok || av.Resolved {
		return nil
	}
	q := &dotsv1.DotQuota{}
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: a.Namespace, Name: dotsv1.DotQuotaName}, q)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if req := q.Status.SpendRequest; err == nil && req != nil && req.Phase == dotsv1.SpendRequestPending &&
		req.RequestID == a.Spec.RequestID && !lifecycle.SpendAnswered(q.Spec, a.Spec.RequestID) {
		d, err := lifecycle.AnswerSpend(q, a.Spec.Decision, "")
		if err != nil {
			return err
		}
		base := q.DeepCopy()
		q.Spec.SpendDecision = d
		if err := r.Client.Patch(ctx, q, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
			return fmt.Errorf("answer the DotQuota of namespace %s as Approval %s was: %w", a.Namespace, a.Name, err)
		}
	}
	logged, _ := json.Marshal(map[string]any{"approval_id": a.Spec.RequestID, "approval": a.Name, "decision": a.Spec.Decision})
	return w.Decide(ctx, nil, store.Event{Dot: w.id, Type: wire.EventApprovalResolved, Source: store.SourceHost, Data: logged})
}

// makeApprovals makes an Approval for each request of the log and writes
// its first phase at once: Pending, or Expired when its task ended before
// the Approval was made (a request read from the log after its task's end),
// so it is never seen waiting. It marks Expired those whose task ended
// later without a decision. The Approval reconciler leaves the first phase
// of a guest's request to this one.
func (r *ApprovalRequestReconciler) makeApprovals(ctx context.Context, dot *dotsv1.Dot, view *projection.View, tasks []*dotsv1.Task, have []dotsv1.Approval) error {
	byRequest := map[string]*dotsv1.Approval{}
	for i := range have {
		byRequest[have[i].Spec.RequestID] = &have[i]
	}
	taskName := map[string]string{}
	for _, t := range tasks {
		taskName[string(t.UID)] = t.Name
	}
	for _, reqID := range view.ApprovalOrder {
		av := view.Approvals[reqID]
		expired := view.Expired(av)
		a, ok := byRequest[reqID]
		if !ok {
			a = &dotsv1.Approval{
				ObjectMeta: metav1.ObjectMeta{Name: dotsv1.ApprovalName(dot.Name, reqID), Namespace: dot.Namespace, Labels: map[string]string{dotsv1.DotLabel: dot.Name}},
				Spec: dotsv1.ApprovalSpec{
					DotName: dot.Name, RequestID: reqID, Tool: av.Requested.Tool, Permission: av.Requested.Permission,
					Reason: av.Requested.Reason, Arguments: &apiextensionsv1.JSON{Raw: av.Requested.Arguments},
				},
			}
			if tb := av.Requested.TaintedBy; tb != nil {
				a.Spec.Taint = &dotsv1.ApprovalTaint{Kind: cutRunes(tb.Kind, 32), Source: cutRunes(tb.Source, 2048)}
			}
			if av.Requested.TaskID != nil {
				a.Spec.TaskName = taskName[*av.Requested.TaskID]
			}
			if err := controllerutil.SetControllerReference(dot, a, r.Client.Scheme()); err != nil {
				return err
			}
			if err := r.Client.Create(ctx, a); err != nil {
				if apierrors.IsAlreadyExists(err) {
					continue // made meanwhile: its phase is the next pass's
				}
				return fmt.Errorf("make the Approval of request %s: %w", reqID, err)
			}
			if expired {
				r.Recorder.Eventf(dot, a, corev1.EventTypeNormal, "ApprovalExpired", "Ask", "Dot %s asked to use %s (%s) for a task that had ended: Approval %s is Expired", dot.Name, av.Requested.Tool, av.Requested.Permission, a.Name)
			} else {
				r.Recorder.Eventf(dot, a, corev1.EventTypeNormal, "ApprovalRequested", "Ask", "Dot %s asks to use %s (%s): Approval %s", dot.Name, av.Requested.Tool, av.Requested.Permission, a.Name)
			}
		}
		phase, write := lifecycle.RequestedApprovalPhase(a.Status.Phase, a.Spec.Decision != "", expired)
		if !write {
			continue
		}
		helper := patch.NewHelper(r.Client, approvalRequestWriter, a)
		a.Status.Phase = phase
		if _, err := helper.Patch(ctx, a); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}

// alwaysUntil is the end of an "always" given for a while (spec.alwaysFor),
// from now: an hour, or the end of the control plane's day (its local time
// zone); ok is false for an always without an end.
func alwaysUntil(alwaysFor string, now time.Time) (time.Time, bool) {
	switch alwaysFor {
	case "1h":
		return now.Add(time.Hour).Truncate(time.Second), true
	case "endOfDay":
		y, m, d := now.Date()
		return time.Date(y, m, d+1, 0, 0, 0, 0, now.Location()), true
	}
	return time.Time{}, false
}

// cutRunes cuts s to at most n code points.
func cutRunes(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n])
	}
	return s
}
