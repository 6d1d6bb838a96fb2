package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
	"github.com/invisible-dots/invisible-dots/internal/lifecycle"
	"github.com/invisible-dots/invisible-dots/internal/store"
)

// The namespace's question for more spend in a day is asked where every
// other question is: in a Dot's log, as a host approval.requested of
// permission limits.spendPerDay, of which the approval request reconciler
// makes an Approval. The Inbox, 'invisible-dots approve' and the channels
// then show it and answer it as any other; the answer is written into the
// DotQuota (ApprovalRequestReconciler.answerSpend). 'invisible-dots quota
// approve|reject' answers the quota directly, and the Approval follows.

// spendTool is the tool an Approval of the namespace's spend names.
const spendTool = "dotquota"

// spendQuestion asks the quota's pending question in one Dot's log, once,
// and settles the question asked before (was) once it is moot: answered on
// the quota itself (the Approval takes the same decision) or its day over
// (the log says it expired). It needs the work log; without one the
// question stays on the quota alone.
func (r *QuotaReconciler) spendQuestion(ctx context.Context, q *dotsv1.DotQuota, dots []dotsv1.Dot, was *dotsv1.SpendRequest) error {
	if r.Log == nil || r.Store == nil {
		return nil
	}
	req := q.Status.SpendRequest
	if was != nil && was.Dot != "" && was.RequestID != "" {
		if req != nil && req.RequestID == was.RequestID {
			req.Dot = was.Dot
		}
		if req == nil || req.RequestID != was.RequestID || req.Phase != dotsv1.SpendRequestPending {
			if err := r.settleSpendQuestion(ctx, q, dots, was); err != nil {
				return err
			}
		}
	}
	if req == nil || req.Phase != dotsv1.SpendRequestPending || req.RequestID == "" || req.Dot != "" {
		return nil
	}
	dot, err := r.spendQuestionDot(ctx, q.Namespace, dots)
	if dot == nil || err != nil {
		return err
	}
	w, err := r.Log.Open(ctx, storeDot(dot))
	if err != nil {
		return err
	}
	defer w.Close()
	req.Dot = dot.Name
	if _, asked := w.View().Approvals[req.RequestID]; asked {
		return nil
	}
	data, err := json.Marshal(protocol.ApprovalRequested{
		ApprovalID: req.RequestID, Tool: spendTool, Permission: protocol.SpendPermission, Reason: req.Message,
		Arguments: spendArguments(q.Namespace, req),
	})
	if err != nil {
		return err
	}
	return w.Decide(ctx, nil, store.Event{Dot: storeDot(dot), Type: wire.EventApprovalRequested, Source: store.SourceHost, Data: data})
}

// spendArguments are what the question's card shows.
func spendArguments(namespace string, req *dotsv1.SpendRequest) json.RawMessage {
	b, _ := json.Marshal(map[string]string{"namespace": namespace, "day": req.Day, "extra_usd": req.SuggestedExtraUSD})
	return b
}

// spendQuestionDot is the Dot that carries the question: the Dot of the
// namespace's oldest held task (the person waits on it), else the first
// Dot by name; nil when the namespace has none.
func (r *QuotaReconciler) spendQuestionDot(ctx context.Context, namespace string, dots []dotsv1.Dot) (*dotsv1.Dot, error) {
	var tasks dotsv1.TaskList
	if err := r.Client.List(ctx, &tasks, client.InNamespace(namespace)); err != nil {
		return nil, err
	}
	held := slices.DeleteFunc(tasks.Items, func(t dotsv1.Task) bool {
		return !meta.IsStatusConditionTrue(t.Status.Conditions, dotsv1.HeldCondition)
	})
	slices.SortFunc(held, func(a, b dotsv1.Task) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	live := slices.DeleteFunc(slices.Clone(dots), func(d dotsv1.Dot) bool { return !d.DeletionTimestamp.IsZero() })
	slices.SortFunc(live, func(a, b dotsv1.Dot) int { return strings.Compare(a.Name, b.Name) })
	for _, t := range held {
		if i := slices.IndexFunc(live, func(d dotsv1.Dot) bool { return d.Name == t.Spec.DotName }); i >= 0 {
			return &live[i], nil
		}
	}
	if len(live) == 0 {
		return nil, nil
	}
	return &live[0], nil
}

// settleSpendQuestion ends a question that is moot. Answered on the quota
// (its day's decision refuses, or allows more than when it was asked), its
// Approval takes the same decision, and the approval request reconciler
// tells the log. Its day over unanswered, the log says it expired, and its
// Approval follows.
func (r *QuotaReconciler) settleSpendQuestion(ctx context.Context, q *dotsv1.DotQuota, dots []dotsv1.Dot, was *dotsv1.SpendRequest) error {
	i := slices.IndexFunc(dots, func(d dotsv1.Dot) bool { return d.Name == was.Dot })
	if i < 0 {
		return nil // its Dot is gone, and its log and Approval with it
	}
	a := &dotsv1.Approval{}
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: q.Namespace, Name: dotsv1.ApprovalName(was.Dot, was.RequestID)}, a)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if err == nil && a.Spec.Decision != "" {
		return nil // answered through the Approval
	}
	if err == nil && lifecycle.SpendAnswered(q.Spec, was.RequestID) {
		base := a.DeepCopy()
		a.Spec.Decision = q.Spec.SpendDecision.Decision
		a.Spec.Note = "answered on the DotQuota of namespace " + q.Namespace
		if err := r.Client.Patch(ctx, a, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
			return fmt.Errorf("answer Approval %s as the DotQuota was: %w", a.Name, err)
		}
		return nil
	}
	w, err := r.Log.Open(ctx, storeDot(&dots[i]))
	if err != nil {
		return err
	}
	defer w.Close()
	if av, ok := w.View().Approvals[was.RequestID]; !ok || av.Resolved {
		return nil
	}
	data, err := json.Marshal(map[string]string{"approval_id": was.RequestID, "approval": dotsv1.ApprovalName(was.Dot, was.RequestID), "decision": wire.DecisionExpired})
	if err != nil {
		return err
	}
	return w.Decide(ctx, nil, store.Event{Dot: storeDot(&dots[i]), Type: wire.EventApprovalResolved, Source: store.SourceHost, Data: data})
}
