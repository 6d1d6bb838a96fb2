package controllers

import (
	"context"
	"encoding/json"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/internal/channels/hub"
	"github.com/invisible-dots/invisible-dots/internal/store"
)

// ChannelApprovals are a Dot's Approvals as the channel hub reads and
// answers them: an answer from a chat is a write of the Approval's
// decision, like kubectl patch, the command line and the web client, so
// the API server's rule that an Approval is answered once holds for it too.
type ChannelApprovals struct {
	// Client lists the Dot's Approvals (the cache, by spec.dotName) and
	// writes a decision.
	Client client.Client
	// Reader reads one Approval from the API server before an answer,
	// never a cache a step behind.
	Reader client.Reader
}

var _ hub.Approvals = (*ChannelApprovals)(nil)

// Pending are the Dot's Approvals of a guest's request that wait for a
// person, oldest first.
func (a *ChannelApprovals) Pending(ctx context.Context, dot store.Dot) ([]hub.Asked, error) {
	var list dotsv1.ApprovalList
	if err := a.Client.List(ctx, &list, client.InNamespace(dot.Namespace), client.MatchingFields{DotNameField: dot.Name}); err != nil {
		return nil, err
	}
	items := list.Items
	slices.SortFunc(items, func(x, y dotsv1.Approval) int {
		return x.CreationTimestamp.Time.Compare(y.CreationTimestamp.Time)
	})
	var out []hub.Asked
	for _, ap := range items {
		if outcomeOf(&ap) != hub.OutcomePending || ap.Spec.RequestID == "" || !ownedBy(&ap, dot) {
			continue
		}
		var args json.RawMessage
		if ap.Spec.Arguments != nil {
			args = ap.Spec.Arguments.Raw
		}
		// The log names a task by its uid, which the prompts keep.
		taskID := ""
		if ap.Spec.TaskName != "" {
			t := &dotsv1.Task{}
			if err := a.Client.Get(ctx, types.NamespacedName{Namespace: dot.Namespace, Name: ap.Spec.TaskName}, t); err == nil {
				taskID = string(t.UID)
			}
		}
		out = append(out, hub.Asked{
			ID: ap.Spec.RequestID, TaskID: taskID, Tool: ap.Spec.Tool, Permission: ap.Spec.Permission,
			Reason: ap.Spec.Reason, Arguments: args,
		})
	}
	return out, nil
}

// ownedBy says whether ap is dot's own (not a namesake's before it).
func ownedBy(ap *dotsv1.Approval, dot store.Dot) bool {
	if ap.Spec.DotName != dot.Name {
		return false
	}
	for _, o := range ap.OwnerReferences {
		if o.Kind == "Dot" && string(o.UID) != dot.UID {
			return false
		}
	}
	return true
}

// outcomeOf is where an Approval stands.
func outcomeOf(ap *dotsv1.Approval) hub.Outcome {
	switch {
	case ap.Spec.Decision == dotsv1.Approve:
		return hub.OutcomeApproved
	case ap.Spec.Decision == dotsv1.Reject:
		return hub.OutcomeRejected
	case ap.Status.Phase == dotsv1.ApprovalExpired:
		return hub.OutcomeExpired
	}
	return hub.OutcomePending
}

// get reads the Approval of the Dot's request id; nil when there is none
// (yet, or of another Dot).
func (a *ChannelApprovals) get(ctx context.Context, dot store.Dot, id string) (*dotsv1.Approval, error) {
	ap := &dotsv1.Approval{}
	err := a.Reader.Get(ctx, types.NamespacedName{Namespace: dot.Namespace, Name: dotsv1.ApprovalName(dot.Name, id)}, ap)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if ap.Spec.RequestID != id || !ownedBy(ap, dot) {
		return nil, nil
	}
	return ap, nil
}

// Outcome is where the request id stands. A request whose Approval is not
// made yet (the log has it; the controller makes it in a moment) waits.
func (a *ChannelApprovals) Outcome(ctx context.Context, dot store.Dot, id string) (hub.Outcome, error) {
	ap, err := a.get(ctx, dot, id)
	if err != nil || ap == nil {
		return hub.OutcomePending, err
	}
	return outcomeOf(ap), nil
}

// answerAttempts bounds the reads again after a Conflict from the control
// plane's own status writes.
const answerAttempts = 5

// Answer writes the decision over the version read, under the field
// manager invisible-dots-channel/BY.
func (a *ChannelApprovals) Answer(ctx context.Context, dot store.Dot, id string, approve bool, by string) (hub.Outcome, error) {
	decision, outcome := dotsv1.Reject, hub.OutcomeRejected
	if approve {
		decision, outcome = dotsv1.Approve, hub.OutcomeApproved
	}
	manager := "invisible-dots-channel/" + by
	if len(manager) > 128 {
		manager = manager[:128]
	}
	for attempt := 0; ; attempt++ {
		ap, err := a.get(ctx, dot, id)
		if err != nil {
			return hub.OutcomeUnknown, err
		}
		if ap == nil {
			return hub.OutcomeUnknown, hub.ErrAnswered
		}
		if o := outcomeOf(ap); o != hub.OutcomePending {
			return o, hub.ErrAnswered
		}
		base := ap.DeepCopy()
		ap.Spec.Decision = decision
		err = a.Client.Patch(ctx, ap, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}), client.FieldOwner(manager))
		if err == nil {
			return outcome, nil
		}
		if !apierrors.IsConflict(err) || attempt == answerAttempts-1 {
			return hub.OutcomeUnknown, err
		}
		// Answered meanwhile, or a status write: read again.
		time.Sleep(50 * time.Millisecond)
	}
}
