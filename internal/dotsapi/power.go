package dotsapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
)

// powerComputer starts, stops or reboots the Dot's computer (ref 9.7's
// Start, Stop and Reboot), as KubeVirt's start, stop and restart
// subresources do: the server applies the Computer's power rule
// (api/v1alpha1 computer_power.go) to the Computer it reads, so a client
// names the action and holds neither the rule nor its annotations. The
// caller needs patch on the Computer, as writing it through the resource API
// would; the write is a merge patch over the version read, under a field
// manager naming the caller, and a Conflict (the host agent and the
// controllers write the Computer's status often) reads it again and decides
// again from the newer version. The Computer's reconciler does the work.
func (h *Handler) powerComputer(action string) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		p, err := pathValues(r, "ns", "name")
		if err != nil {
			return err
		}
		// A Dot's Computer has the Dot's name.
		key := types.NamespacedName{Namespace: p[0], Name: p[1]}
		u, err := h.callerMayPatch(r, "computers", key)
		if err != nil {
			return err
		}
		if len(r.URL.Query()) > 0 {
			return badRequest("a computer's %s takes no query parameters", action)
		}
		if r.ContentLength != 0 {
			// No body, or an empty JSON object: a field would be a
			// parameter this route does not take.
			var none struct{}
			if err := decode(w, r, wire.MaxComputerPowerBody, &none); err != nil {
				return err
			}
		}
		if h.writer == nil {
			return apiErrorf(http.StatusNotImplemented, wire.CodeNotImplemented, "this server does not %s computers here: run 'invisible-dots computer %s %s -n %s'", action, action, key.Name, key.Namespace)
		}
		manager := "invisible-dots-api/" + u.GetName()
		if len(manager) > 128 {
			manager = manager[:128]
		}
		var c *dotsv1.Computer
		err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var err error
			c, err = h.powerOnce(r.Context(), key, action, manager)
			return err
		})
		if err != nil {
			return powerError(key, action, err)
		}
		out := wire.ComputerPowered{Namespace: c.Namespace, Name: c.Name, Action: action, RunStrategy: string(c.Spec.RunStrategy)}
		switch action {
		case wire.PowerStart:
			out.RequestedAt = c.Annotations[dotsv1.StartRequestedAnnotation]
		case wire.PowerReboot:
			out.RequestedAt = c.Annotations[dotsv1.RebootRequestedAnnotation]
		}
		writeJSON(w, http.StatusOK, out)
		return nil
	}
}

// powerOnce reads the Computer, applies the action's rule, and writes the
// change over the version read.
func (h *Handler) powerOnce(ctx context.Context, key types.NamespacedName, action, manager string) (*dotsv1.Computer, error) {
	c := &dotsv1.Computer{}
	if err := h.writer.Get(ctx, key, c); err != nil {
		return nil, err
	}
	base := c.DeepCopy()
	now := h.clock.Now()
	switch action {
	case wire.PowerStart:
		c.RequestStart(now)
	case wire.PowerStop:
		c.Halt()
	case wire.PowerReboot:
		if err := c.RequestReboot(now); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("no power rule for the action %q", action)
	}
	return c, h.writer.Patch(ctx, c, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}), client.FieldOwner(manager))
}

// powerError is the answer of a power action that was not written.
func powerError(key types.NamespacedName, action string, err error) error {
	switch {
	case errors.Is(err, dotsv1.ErrHalted):
		return apiErrorf(http.StatusConflict, wire.CodeComputerHalted, "computer %s is stopped by a person (runStrategy Halted): start it instead (POST %s), which lifts that stop and boots it", key, wire.ComputerPowerPath(key.Namespace, key.Name, wire.PowerStart))
	case apierrors.IsNotFound(err):
		return apiErrorf(http.StatusNotFound, wire.CodeNotFound, "there is no Computer %s in namespace %s: a Dot's computer is made once the Dot is placed on a host (kubectl get computers -n %s lists them)", key.Name, key.Namespace, key.Namespace)
	case apierrors.IsConflict(err):
		return apiErrorf(http.StatusConflict, wire.CodeComputerChanged, "computer %s kept changing while its %s was written (its status is written often): look at its state and ask again", key, action)
	case apierrors.IsInvalid(err):
		// The Computer's rules: the API server's words.
		return badRequest("%s", err.Error())
	}
	return fmt.Errorf("%s computer %s: %w", action, key, err)
}
