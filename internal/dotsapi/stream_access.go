package dotsapi

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
)

// defaultStreamAccessTTL is how long a stream trusts the authorizer's
// answer for a namespace: a binding revoked takes effect within it.
const defaultStreamAccessTTL = 30 * time.Second

// streamAccess remembers, for one stream, whether its caller may get
// dots/events in each namespace, and asks the authorizer again once the
// answer is older than the handler's access TTL. It belongs to the
// stream's own goroutine.
type streamAccess struct {
	h    *Handler
	user user.Info
	// dot is the Dot of a Dot's stream, asked for by name; "" asks for the
	// namespace as a whole, as a list of its Dots' events would.
	dot   string
	known map[string]accessAnswer
}

type accessAnswer struct {
	allowed bool
	until   time.Time
}

func (h *Handler) newStreamAccess(u user.Info, dot string) *streamAccess {
	return &streamAccess{h: h, user: u, dot: dot, known: map[string]accessAnswer{}}
}

// remember records an answer got otherwise (the route's own check).
func (a *streamAccess) remember(namespace string, allowed bool) {
	a.known[namespace] = accessAnswer{allowed: allowed, until: a.h.clock.Now().Add(a.h.accessTTL)}
}

// stillValid is asked at every keep-alive of a stream: errAccessRevoked
// once the caller's credential was revoked since the stream opened, or,
// for a Dot's stream, once its right to read the Dot is gone.
func (a *streamAccess) stillValid(ctx context.Context, namespace string) error {
	if a.credentialRevoked(ctx) {
		return errAccessRevoked
	}
	if a.dot != "" && !a.allowed(ctx, namespace) {
		return errAccessRevoked
	}
	return nil
}

// credentialRevoked says whether the caller's credential is gone. A
// ServiceAccount's tokens (every person `user add` makes) live no longer
// than the account: `kubectl delete serviceaccount` revokes them, which the
// API server applies to new requests at once and this check to the streams
// already open. The account of the caller's name must still exist with the
// UID its token named; a read that fails counts as gone (the client
// resumes with Last-Event-ID and is authenticated again). Other callers (the
// server's own token, a cluster's users) have no such record to ask.
func (a *streamAccess) credentialRevoked(ctx context.Context) bool {
	ns, name, err := serviceaccount.SplitUsername(a.user.GetName())
	if err != nil {
		return false
	}
	sa := &corev1.ServiceAccount{}
	if err := a.h.dots.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, sa); err != nil {
		if !apierrors.IsNotFound(err) {
			a.h.log.Error(err, "cannot read a stream's caller's ServiceAccount; the stream ends and its client resumes", "user", a.user.GetName())
		}
		return true
	}
	uid := a.user.GetUID()
	return uid != "" && string(sa.UID) != uid
}

// allowed says whether the caller may read the events of namespace (of
// the stream's Dot there, for a Dot's stream). An authorizer that fails
// answers no: the stream goes on without them, or ends for a Dot's stream.
func (a *streamAccess) allowed(ctx context.Context, namespace string) bool {
	if ans, ok := a.known[namespace]; ok && a.h.clock.Now().Before(ans.until) {
		return ans.allowed
	}
	err := a.h.authorize(ctx, authorizer.AttributesRecord{
		User: a.user, Verb: "get", Namespace: namespace, Name: a.dot, ResourceRequest: true,
		APIGroup: dotsv1.GroupVersion.Group, APIVersion: dotsv1.GroupVersion.Version,
		Resource: "dots", Subresource: eventsSubresource,
	})
	a.remember(namespace, err == nil)
	return err == nil
}
