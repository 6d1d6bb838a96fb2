package dotsapi

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	dotsclient "github.com/invisible-dots/invisible-dots/internal/dotsapi/client"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
)

// syncBuffer is a log's output, written from the handler's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// webhookEnv is a guest env with a log kept, and a function that makes a
// Webhook of team-a in its API server.
func webhookEnv(t *testing.T, intercept interceptor.Funcs) (*guestEnv, *syncBuffer, func(name string, sig dotsv1.WebhookSignature) *dotsv1.Webhook) {
	t.Helper()
	logs := &syncBuffer{}
	log := funcr.New(func(prefix, args string) { fmt.Fprintln(logs, prefix, args) }, funcr.Options{Verbosity: 10})
	e := newGuestEnv(t, guestEnvOptions{log: log, intercept: intercept})
	mk := func(name string, sig dotsv1.WebhookSignature) *dotsv1.Webhook {
		t.Helper()
		wh := &dotsv1.Webhook{
			ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name, UID: types.UID("uid-webhook-" + name)},
			Spec: dotsv1.WebhookSpec{
				DotName: runningDot.Name, Signature: sig,
				SecretRef: dotsv1.WebhookSecretRef{Name: dotsv1.WebhookSecretName(name), Key: dotsv1.WebhookSecretKey},
				Task:      dotsv1.WebhookTaskTemplate{Description: "look at {{.}}"},
			},
		}
		if err := e.client.Create(context.Background(), wh); err != nil {
			t.Fatal(err)
		}
		return wh
	}
	return e, logs, mk
}

// secretOf is the Secret of the Webhook wh, or nil when there is none.
func secretOf(t *testing.T, c client.Client, wh *dotsv1.Webhook) *corev1.Secret {
	t.Helper()
	sec := &corev1.Secret{}
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: wh.Namespace, Name: wh.Spec.SecretRef.Name}, sec); err != nil {
		if strings.Contains(err.Error(), "not found") {
			return nil
		}
		t.Fatal(err)
	}
	return sec
}

// A Webhook's secret is made by the server, for an editor and not a viewer,
// returned once and stored in a Secret the Webhook owns.
func TestNewWebhookSecret(t *testing.T) {
	ctx := context.Background()
	e, logs, makeWebhook := webhookEnv(t, interceptor.Funcs{})
	gh := makeWebhook("ci-red", dotsv1.WebhookGitHub)
	std := makeWebhook("billing", dotsv1.WebhookStandard)
	// A Secret of the Webhook already, with another key beside the secret.
	if err := e.client.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: std.Spec.SecretRef.Name,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(std, dotsv1.GroupVersion.WithKind("Webhook"))}},
		Data: map[string][]byte{dotsv1.WebhookSecretKey: []byte("whsec_old"), "note": []byte("kept")},
	}); err != nil {
		t.Fatal(err)
	}
	// A Webhook whose secretRef names a Secret it does not own: the Dot's.
	foreign := makeWebhook("foreign", dotsv1.WebhookToken)
	foreign.Spec.SecretRef.Name = mcpSecretName
	if err := e.client.Update(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	foreignBefore := secretOf(t, e.client, foreign).Data

	path := wire.WebhookSecretPath("team-a", gh.Name)
	for _, tc := range []struct {
		reason, who, path, body string
		want                    answer
	}{
		{"the viewer may not make one, and is told the role that may", "viewer", path, "",
			answer{http.StatusForbidden, wire.CodeForbidden, `user "vera" may not update webhooks/secret of "team-a/ci-red"; a Webhook's secret is made by the server for whoever may update webhooks/secret in namespace team-a (the role dots-editor`}},
		{"someone without a role may not", "nobody", path, "",
			answer{http.StatusForbidden, wire.CodeForbidden, `user "nora" may not update webhooks/secret`}},
		{"the editor of team-a makes none in team-b", "editor", wire.WebhookSecretPath("team-b", gh.Name), "",
			answer{http.StatusForbidden, wire.CodeForbidden, "may not update webhooks/secret"}},
		{"a Webhook that does not exist", "editor", wire.WebhookSecretPath("team-a", "ghost"), "",
			answer{http.StatusNotFound, wire.CodeNotFound, "there is no Webhook ghost in namespace team-a"}},
		{"a caller never gives the secret", "editor", path, `{"secret":"mine-0123456789"}`,
			answer{http.StatusBadRequest, wire.CodeInvalidRequest, `unknown field "secret"`}},
		{"no query parameters", "editor", path + "?secret=x", "",
			answer{http.StatusBadRequest, wire.CodeInvalidRequest, "takes no query parameters"}},
		{"a name that is not one", "editor", wire.WebhookSecretPath("team-a", "Not_A_Name"), "",
			answer{http.StatusBadRequest, wire.CodeInvalidRequest, "the Webhook's name"}},
		{"a Secret the Webhook does not own is not written", "editor", wire.WebhookSecretPath("team-a", foreign.Name), "",
			answer{http.StatusConflict, wire.CodeSecretNotOwned, "the Secret team-a/" + mcpSecretName + " that Webhook team-a/foreign names (spec.secretRef) is owned by nothing (made by hand), not by the Webhook"}},
		{"GET is no way to read one back", "editor", path, "",
			answer{http.StatusMethodNotAllowed, wire.CodeMethodNotAllowed, "does not take GET"}},
	} {
		t.Run(tc.reason, func(t *testing.T) {
			method := http.MethodPost
			if strings.HasPrefix(tc.reason, "GET") {
				method = http.MethodGet
			}
			got, _ := e.call(t, tc.who, method, tc.path, "application/json", tc.body)
			if !got.matches(tc.want) {
				t.Errorf("%s %s as %s:\ngot  %+v\nwant %+v", method, tc.path, tc.who, got, tc.want)
			}
			if strings.Contains(got.Message, "mine-0123456789") {
				t.Errorf("the refusal %q repeats what the body held", got.Message)
			}
		})
	}
	if sec := secretOf(t, e.client, gh); sec != nil {
		t.Errorf("refused calls made the Secret %s", sec.Name)
	}
	if after := secretOf(t, e.client, foreign).Data; !bytes.Equal(after[dotsv1.OpenRouterKeySecretKey], foreignBefore[dotsv1.OpenRouterKeySecretKey]) || len(after) != len(foreignBefore) {
		t.Errorf("the Secret the Webhook does not own was changed")
	}

	editor, err := dotsclient.New(e.restConfig("editor"))
	if err != nil {
		t.Fatal(err)
	}
	// Made: the Secret, owned by the Webhook, holds what the answer says.
	first, err := editor.NewWebhookSecret(ctx, "team-a", gh.Name)
	if err != nil {
		t.Fatalf("NewWebhookSecret as the editor: %v", err)
	}
	if b, err := hex.DecodeString(first.Secret); err != nil || len(b) != 32 {
		t.Errorf("a github secret %d characters long; want 32 random bytes in hex", len(first.Secret))
	}
	if first.Namespace != "team-a" || first.Name != gh.Name || first.Signature != "github" || first.SecretName != gh.Spec.SecretRef.Name || !first.Created || first.Warning != "" {
		t.Errorf("the answer is %+v", wire.WebhookSecret{Namespace: first.Namespace, Name: first.Name, Signature: first.Signature, SecretName: first.SecretName, Created: first.Created, Warning: first.Warning})
	}
	sec := secretOf(t, e.client, gh)
	if sec == nil {
		t.Fatal("no Secret was made")
	}
	if !metav1.IsControlledBy(sec, gh) || sec.Type != corev1.SecretTypeOpaque || !ptr.Deref(sec.OwnerReferences[0].BlockOwnerDeletion, false) {
		t.Errorf("the Secret is owned by %+v, of type %s; want the Webhook its controller, blocking its deletion", sec.OwnerReferences, sec.Type)
	}
	if string(sec.Data[dotsv1.WebhookSecretKey]) != first.Secret || len(sec.Data) != 1 {
		t.Errorf("the Secret does not hold the secret answered (%d keys)", len(sec.Data))
	}
	marked := &dotsv1.Webhook{}
	if err := e.client.Get(ctx, client.ObjectKeyFromObject(gh), marked); err != nil {
		t.Fatal(err)
	}
	firstMark := marked.Annotations[dotsv1.WebhookSecretRotatedAnnotation]
	if _, err := time.Parse(time.RFC3339Nano, firstMark); err != nil {
		t.Errorf("the Webhook is not marked rotated (%q): the listener would keep the old secret", firstMark)
	}

	// Made again (a rotation): another secret replaces it, in the same
	// Secret.
	second, err := editor.NewWebhookSecret(ctx, "team-a", gh.Name)
	if err != nil {
		t.Fatal(err)
	}
	if second.Secret == first.Secret || second.Created {
		t.Errorf("the rotation answered the same secret (%v) or made a Secret again (%v)", second.Secret == first.Secret, second.Created)
	}
	again := secretOf(t, e.client, gh)
	if string(again.Data[dotsv1.WebhookSecretKey]) != second.Secret || again.UID != sec.UID {
		t.Errorf("the Secret does not hold the new secret, or is another Secret")
	}
	if err := e.client.Get(ctx, client.ObjectKeyFromObject(gh), marked); err != nil {
		t.Fatal(err)
	}
	if m := marked.Annotations[dotsv1.WebhookSecretRotatedAnnotation]; m == firstMark {
		t.Errorf("the rotation did not mark the Webhook again (%q)", m)
	}

	// A standard Webhook's Secret of its own: the secret's key replaced, the
	// others kept; the secret in the form Standard Webhooks senders take.
	s, err := editor.NewWebhookSecret(ctx, "team-a", std.Name)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(s.Secret, "whsec_") || s.Created {
		t.Errorf("a standard secret without whsec_, or its Secret made again (%v)", s.Created)
	}
	if got := secretOf(t, e.client, std).Data; string(got[dotsv1.WebhookSecretKey]) != s.Secret || string(got["note"]) != "kept" {
		t.Errorf("the Secret's keys after the rotation: the secret replaced %v, the note kept %v", string(got[dotsv1.WebhookSecretKey]) == s.Secret, string(got["note"]) == "kept")
	}

	// No secret in the log.
	for _, v := range []string{first.Secret, second.Secret, s.Secret} {
		if strings.Contains(logs.String(), v) {
			t.Errorf("the log holds a secret:\n%s", logs.String())
		}
	}
}

// A Secret a removed Webhook of the same name left is the garbage
// collector's: the server waits for it to go, then makes the Webhook's own;
// one that stays is refused, never taken over.
func TestNewWebhookSecretAfterARemovedWebhook(t *testing.T) {
	ctx := context.Background()
	defer func(d time.Duration) { removedSecretWait = d }(removedSecretWait)
	removedSecretWait = 2 * time.Second
	e, _, makeWebhook := webhookEnv(t, interceptor.Funcs{})
	wh := makeWebhook("ci-red", dotsv1.WebhookGitHub)
	old := &dotsv1.Webhook{ObjectMeta: metav1.ObjectMeta{Namespace: wh.Namespace, Name: wh.Name, UID: "uid-of-the-removed-one"}}
	left := func() *corev1.Secret {
		return &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: wh.Spec.SecretRef.Name,
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(old, dotsv1.GroupVersion.WithKind("Webhook"))}},
			Data: map[string][]byte{dotsv1.WebhookSecretKey: []byte("the-old-secret")},
		}
	}
	if err := e.client.Create(ctx, left()); err != nil {
		t.Fatal(err)
	}
	editor, err := dotsclient.New(e.restConfig("editor"))
	if err != nil {
		t.Fatal(err)
	}
	// The garbage collector takes it away a moment later.
	gone := make(chan error, 1)
	go func() {
		time.Sleep(300 * time.Millisecond)
		gone <- e.client.Delete(ctx, left())
	}()
	got, err := editor.NewWebhookSecret(ctx, "team-a", wh.Name)
	if err != nil {
		t.Fatalf("NewWebhookSecret while the old Secret goes: %v", err)
	}
	if err := <-gone; err != nil {
		t.Fatal(err)
	}
	sec := secretOf(t, e.client, wh)
	if !got.Created || !metav1.IsControlledBy(sec, wh) || string(sec.Data[dotsv1.WebhookSecretKey]) != got.Secret {
		t.Errorf("after the old Secret went: made %v, the new Secret the Webhook's %v, holding the secret answered %v",
			got.Created, metav1.IsControlledBy(sec, wh), string(sec.Data[dotsv1.WebhookSecretKey]) == got.Secret)
	}

	// One that stays: refused, untouched.
	other := makeWebhook("stays", dotsv1.WebhookGitHub)
	stale := left()
	stale.Name = other.Spec.SecretRef.Name
	stale.OwnerReferences[0].Name = other.Name
	if err := e.client.Create(ctx, stale); err != nil {
		t.Fatal(err)
	}
	removedSecretWait = 200 * time.Millisecond
	_, err = editor.NewWebhookSecret(ctx, "team-a", other.Name)
	if dotsclient.StatusOf(err) != http.StatusConflict || dotsclient.CodeOf(err) != wire.CodeSecretNotOwned || !strings.Contains(err.Error(), "try again in a few seconds") {
		t.Errorf("a removed Webhook's Secret that stays: %v; want 409 secret_not_owned, try again", err)
	}
	if sec := secretOf(t, e.client, other); string(sec.Data[dotsv1.WebhookSecretKey]) != "the-old-secret" || metav1.IsControlledBy(sec, other) {
		t.Errorf("the removed Webhook's Secret was taken over")
	}
}

// A secret stored whose Webhook could not be marked rotated is answered all
// the same, with a warning: without the answer it would be lost.
func TestNewWebhookSecretWhenTheMarkFails(t *testing.T) {
	ctx := context.Background()
	e, logs, makeWebhook := webhookEnv(t, interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if _, ok := obj.(*dotsv1.Webhook); ok {
				return errors.New("the API server is gone for a moment")
			}
			return c.Patch(ctx, obj, patch, opts...)
		},
	})
	wh := makeWebhook("ci-red", dotsv1.WebhookToken)
	editor, err := dotsclient.New(e.restConfig("editor"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := editor.NewWebhookSecret(ctx, "team-a", wh.Name)
	if err != nil {
		t.Fatalf("NewWebhookSecret: %v", err)
	}
	if !strings.Contains(got.Warning, "could not be marked rotated") {
		t.Errorf("the warning is %q", got.Warning)
	}
	if sec := secretOf(t, e.client, wh); sec == nil || string(sec.Data[dotsv1.WebhookSecretKey]) != got.Secret {
		t.Errorf("the secret answered is not the one stored")
	}
	if l := logs.String(); !strings.Contains(l, "could not be marked rotated") || strings.Contains(l, got.Secret) {
		t.Errorf("the log says the mark failed %v, holds the secret %v", strings.Contains(l, "could not be marked rotated"), strings.Contains(l, got.Secret))
	}
}
