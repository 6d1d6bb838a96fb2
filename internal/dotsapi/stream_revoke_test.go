package dotsapi

import (
	"context"
	"io"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
)

// A person's open streams end once their ServiceAccount is deleted (which
// revokes its tokens), even while their RoleBinding still lets them read:
// the stream asks for the credential at every keep-alive, not only RBAC.
func TestStreamsEndWhenTheCallersAccountIsDeleted(t *testing.T) {
	const saUID = "uid-of-ada"
	users["ada"] = &user.DefaultInfo{Name: serviceaccount.MakeUsername("team-a", "ada"), UID: saUID, Groups: []string{user.AllAuthenticated}}
	t.Cleanup(func() { delete(users, "ada") })
	authz := authorizer.AuthorizerFunc(func(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		if a.GetUser().GetName() == serviceaccount.MakeUsername("team-a", "ada") && a.GetNamespace() == "team-a" {
			return authorizer.DecisionAllow, "", nil // the binding outlives the account
		}
		return rbac.Authorize(ctx, a)
	})
	var reader client.Client
	e := newEnv(t, func(o *Options, _ *FeedOptions) {
		o.Authorizer = authz
		o.StreamKeepAlive = 50 * time.Millisecond
		reader = o.Reader.(client.Client)
	})
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "ada", UID: saUID}}
	if err := reader.Create(context.Background(), sa); err != nil {
		t.Fatal(err)
	}
	start := strconv.FormatInt(lastID(t), 10)
	streams := map[string]*sse{
		"a Dot's stream":          e.openSSE(t, "ada", wire.DotStreamPath("team-a", "helper")+"?after="+start, ""),
		"the stream of every Dot": e.openSSE(t, "ada", wire.StreamPath+"?after="+start, ""),
	}
	for name, s := range streams {
		if m := s.next(t); len(m.comments) == 0 && !m.hasID {
			t.Fatalf("%s sent %+v first, want its keep-alives going", name, m)
		}
	}
	if err := reader.Delete(context.Background(), sa); err != nil {
		t.Fatal(err)
	}
	for name, s := range streams {
		ended := make(chan error, 1)
		go func() {
			_, err := io.Copy(io.Discard, s.br)
			ended <- err
		}()
		select {
		case <-ended:
		case <-time.After(10 * time.Second):
			t.Errorf("%s still runs 10 s after its caller's account was deleted", name)
		}
	}
}
