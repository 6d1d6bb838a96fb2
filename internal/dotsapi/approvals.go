package dotsapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/approvalonce"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
)

// answerApproval answers an Approval (ref 9.6's POST /api/approvals/:id/
// approve and reject): the caller must be allowed to patch it, and the
// decision is written as kubectl patch writes it, over the version read,
// under a field manager that names the caller. An Approval answered
// already, here or anywhere else, the same decision included, or one that
// no longer waits (its task ended) is a 409 already_resolved naming the
// answer; the API server's own 409 for an answer given between the read and
// the write says the same.
func (h *Handler) answerApproval(decision dotsv1.ApprovalDecision) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		p, err := pathValues(r, "ns", "approval")
		if err != nil {
			return err
		}
		key := types.NamespacedName{Namespace: p[0], Name: p[1]}
		u, err := h.callerMayPatch(r, "approvals", key)
		if err != nil {
			return err
		}
		if len(r.URL.Query()) > 0 {
			return badRequest("an answer takes no query parameters")
		}
		var body wire.ApprovalAnswer
		if r.ContentLength != 0 {
			if err := decode(w, r, wire.MaxApprovalAnswerBody, &body); err != nil {
				return err
			}
		}
		if body.Always && decision != dotsv1.Approve {
			return badRequest("always is for approve: a rejection is for this call only")
		}
		switch body.AlwaysFor {
		case "", wire.AlwaysForHour, wire.AlwaysForEndOfDay:
		default:
			return badRequest("alwaysFor is 1h or endOfDay (or absent: for ever)")
		}
		if body.AlwaysFor != "" && !body.Always {
			return badRequest("alwaysFor bounds an always approval: give always too")
		}
		if body.Scope != "" && (body.Scope != wire.ScopeTask || decision != dotsv1.Approve) {
			return badRequest("scope is task, on an approval only")
		}
		if h.writer == nil {
			return apiErrorf(http.StatusNotImplemented, wire.CodeNotImplemented, "this server does not answer approvals here: patch the Approval (kubectl patch approval %s --type merge -p '{\"spec\":{\"decision\":\"%s\"}}')", key.Name, decision)
		}
		manager := "invisible-dots-api/" + u.GetName()
		if len(manager) > 128 {
			manager = manager[:128]
		}
		for attempt := 0; ; attempt++ {
			a, err := h.answerOnce(r.Context(), key, decision, body, manager)
			if err == nil {
				writeJSON(w, http.StatusOK, wire.ApprovalAnswered{Namespace: a.Namespace, Name: a.Name, Decision: string(a.Spec.Decision), Note: a.Spec.Note, Always: a.Spec.Always})
				return nil
			}
			// A newer version only for the control plane's status write:
			// read again.
			if !apierrors.IsConflict(err) || approvalonce.IsAlreadyResolved(err) || attempt >= 4 {
				return answerError(key, err)
			}
		}
	}
}

// answerOnce reads the Approval and writes the answer over that version.
func (h *Handler) answerOnce(ctx context.Context, key types.NamespacedName, decision dotsv1.ApprovalDecision, body wire.ApprovalAnswer, manager string) (*dotsv1.Approval, error) {
	a := &dotsv1.Approval{}
	if err := h.writer.Get(ctx, key, a); err != nil {
		return nil, err
	}
	if a.Spec.Decision != "" {
		return nil, apiErrorf(http.StatusConflict, wire.CodeAlreadyResolved, "Approval %s was already answered elsewhere: %s", key, approvalonce.Answered(a))
	}
	if a.Status.Phase == dotsv1.ApprovalExpired {
		return nil, apiErrorf(http.StatusConflict, wire.CodeAlreadyResolved, "Approval %s no longer waits: %s before anyone answered (Expired)", key, approvalonce.EndedWhy(a))
	}
	if body.Always && protocol.OneTimePermission(a.Spec.Permission) {
		return nil, badRequest("a budget or spend approval answers one question: always is not for it")
	}
	base := a.DeepCopy()
	a.Spec.Decision, a.Spec.Note, a.Spec.Always = decision, body.Note, body.Always
	a.Spec.AlwaysFor, a.Spec.Scope = body.AlwaysFor, body.Scope
	return a, h.writer.Patch(ctx, a, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}), client.FieldOwner(manager))
}

// answerError is the answer of a failed write of an answer.
func answerError(key types.NamespacedName, err error) error {
	var ae *apiError
	var st apierrors.APIStatus
	switch {
	case errors.As(err, &ae):
		return err
	case apierrors.IsNotFound(err):
		return apiErrorf(http.StatusNotFound, wire.CodeNotFound, "no Approval %s (kubectl get approvals -n %s lists them)", key, key.Namespace)
	case approvalonce.IsAlreadyResolved(err) && errors.As(err, &st):
		return apiErrorf(http.StatusConflict, wire.CodeAlreadyResolved, "%s", strings.TrimPrefix(st.Status().Message, wire.CodeAlreadyResolved+": "))
	case apierrors.IsInvalid(err):
		// The Approval's rules (a note's length, a NUL): the API server's words.
		return badRequest("%s", err.Error())
	}
	return fmt.Errorf("answer Approval %s: %w", key, err)
}

// callerMayPatch is the caller of r, when RBAC lets them patch the object
// key of our API group's resource: what a route that writes one object as
// kubectl patch would (an answer, a power verb) asks first.
func (h *Handler) callerMayPatch(r *http.Request, resource string, key types.NamespacedName) (user.Info, error) {
	u, err := callerOf(r)
	if err != nil {
		return nil, err
	}
	if err := h.authorize(r.Context(), authorizer.AttributesRecord{
		User: u, Verb: "patch", Namespace: key.Namespace, Name: key.Name, ResourceRequest: true,
		APIGroup: dotsv1.GroupVersion.Group, APIVersion: dotsv1.GroupVersion.Version, Resource: resource,
	}); err != nil {
		return nil, err
	}
	return u, nil
}
