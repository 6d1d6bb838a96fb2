package dotsapi

import (
	"context"
	"time"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

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
