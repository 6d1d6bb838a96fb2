package dotsapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
	"github.com/invisible-dots/invisible-dots/internal/hooks"
)

// The subresource of a Webhook's signing secret: dots-editor may update it
// (have the server make a new one); nobody reads a secret back, a viewer
// included.
const webhookSecretSubresource = "secret"

// newWebhookSecret makes a new signing secret for a Webhook and stores it,
// with the server's own credential, in the Secret the Webhook's
// spec.secretRef names: made, owned by the Webhook (gone with it), when
// missing; its key replaced when the Secret is the Webhook's; refused when
// it is not. The caller needs update on webhooks/secret, not on Secrets: a
// person given dots-editor, who holds no Secrets, adds and rotates
// Webhooks. The secret is made here (a caller never sends one) and is in
// the answer only: never in a log, an error or an event. The Webhook is
// then marked rotated, so the listener drops the old secret at once.
func (h *Handler) newWebhookSecret(w http.ResponseWriter, r *http.Request) error {
	p, err := pathValues(r, "ns", "webhook")
	if err != nil {
		return err
	}
	key := types.NamespacedName{Namespace: p[0], Name: p[1]}
	u, err := callerOf(r)
	if err != nil {
		return err
	}
	if err := h.authorize(r.Context(), authorizer.AttributesRecord{
		User: u, Verb: "update", Namespace: key.Namespace, Name: key.Name, ResourceRequest: true,
		APIGroup: dotsv1.GroupVersion.Group, APIVersion: dotsv1.GroupVersion.Version,
		Resource: "webhooks", Subresource: webhookSecretSubresource,
	}); err != nil {
		var ae *apiError
		if errors.As(err, &ae) && ae.status == http.StatusForbidden {
			ae.message += fmt.Sprintf("; a Webhook's secret is made by the server for whoever may update webhooks/secret in namespace %s (the role dots-editor: invisible-dots user add NAME --role editor -n %s)", key.Namespace, key.Namespace)
		}
		return err
	}
	if len(r.URL.Query()) > 0 {
		return badRequest("a Webhook's new secret takes no query parameters")
	}
	if r.ContentLength != 0 {
		// No body, or an empty JSON object: the server makes the secret,
		// a caller never gives one.
		var none struct{}
		if err := decode(w, r, wire.MaxWebhookSecretBody, &none); err != nil {
			return err
		}
	}
	if h.writer == nil {
		return apiErrorf(http.StatusNotImplemented, wire.CodeNotImplemented, "this server does not make Webhook secrets")
	}
	wh := &dotsv1.Webhook{}
	if err := h.writer.Get(r.Context(), key, wh); err != nil {
		if apierrors.IsNotFound(err) {
			return apiErrorf(http.StatusNotFound, wire.CodeNotFound, "there is no Webhook %s in namespace %s (invisible-dots webhook ls -n %s lists them)", key.Name, key.Namespace, key.Namespace)
		}
		return fmt.Errorf("read Webhook %s: %w", key, err)
	}
	if wh.DeletionTimestamp != nil {
		return apiErrorf(http.StatusNotFound, wire.CodeNotFound, "Webhook %s is being removed", key)
	}
	ref := wh.Spec.SecretRef
	if problems := validation.IsDNS1123Subdomain(ref.Name); len(problems) > 0 {
		return badRequest("Webhook %s's spec.secretRef.name %q cannot name a Secret: %s", key, ref.Name, strings.Join(problems, "; "))
	}
	if problems := validation.IsConfigMapKey(ref.SecretKey()); len(problems) > 0 {
		return badRequest("Webhook %s's spec.secretRef.key %q cannot be a key of a Secret: %s", key, ref.SecretKey(), strings.Join(problems, "; "))
	}
	secret, err := hooks.NewSecret(string(wh.Spec.Signature))
	if err != nil {
		return badRequest("Webhook %s: %v", key, err)
	}
	created, err := h.storeWebhookSecret(r.Context(), wh, secret)
	if err != nil {
		return err
	}
	out := wire.WebhookSecret{
		Namespace: wh.Namespace, Name: wh.Name, Signature: string(wh.Spec.Signature),
		Secret: secret, SecretName: ref.Name, Created: created,
	}
	// Told to the listener through the Webhook, which it watches: it reads
	// the secret again at once, and the old one is refused.
	marked := wh.DeepCopy()
	if marked.Annotations == nil {
		marked.Annotations = map[string]string{}
	}
	marked.Annotations[dotsv1.WebhookSecretRotatedAnnotation] = h.clock.Now().UTC().Format(time.RFC3339Nano)
	if err := h.writer.Patch(r.Context(), marked, client.MergeFrom(wh)); err != nil {
		// Stored all the same: the caller must have the secret, or it is
		// lost. The listener reads the Secret again within 10 s.
		h.log.Error(err, "a Webhook's new secret was stored and the Webhook could not be marked rotated: the listener takes the old one for up to 10 s more", "webhook", key.String())
		out.Warning = "the new secret is stored, but the Webhook could not be marked rotated: the old secret may be taken for up to 10 s more"
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// storeWebhookSecret writes secret under the key wh's spec.secretRef names,
// in its Secret, and says whether the Secret was made. A Secret that is not
// the Webhook's is refused (409), except one a removed Webhook of the same
// name left, which the garbage collector would take away: it is replaced.
func (h *Handler) storeWebhookSecret(ctx context.Context, wh *dotsv1.Webhook, secret string) (bool, error) {
	ref := wh.Spec.SecretRef
	key := types.NamespacedName{Namespace: wh.Namespace, Name: ref.Name}
	what := fmt.Sprintf("the secret of Webhook %s/%s in Secret %s", wh.Namespace, wh.Name, ref.Name)
	for attempt := 0; ; attempt++ {
		var (
			made bool
			err  error
			sec  = &corev1.Secret{}
		)
		err = h.writer.Get(ctx, key, sec)
		switch {
		case apierrors.IsNotFound(err):
			made, err = true, h.writer.Create(ctx, webhookSecret(wh, secret))
		case err != nil:
			return false, fmt.Errorf("read the Secret %s of Webhook %s/%s: %w", key, wh.Namespace, wh.Name, err)
		default:
			switch owner := secretOwner(sec, wh); {
			case owner == ownedByWebhook:
				if sec.Data == nil {
					sec.Data = map[string][]byte{}
				}
				sec.Data[ref.SecretKey()] = []byte(secret)
				err = h.writer.Update(ctx, sec)
			case owner == ownedByRemoved:
				// The garbage collector takes it away within moments: wait
				// for that (the server deletes no Secret itself), then make
				// the Webhook's own.
				if attempt < 4 && h.secretGone(ctx, key, sec.UID) {
					continue
				}
				return false, apiErrorf(http.StatusConflict, wire.CodeSecretNotOwned,
					"the Secret %s that Webhook %s/%s names (spec.secretRef) is still the one of a removed Webhook of the same name, which the garbage collector has not taken away yet: try again in a few seconds", key, wh.Namespace, wh.Name)
			default:
				return false, apiErrorf(http.StatusConflict, wire.CodeSecretNotOwned,
					"the Secret %s that Webhook %s/%s names (spec.secretRef) %s, not by the Webhook: the server writes no Secret it does not own through a Webhook. "+
						"Point spec.secretRef at a Secret that does not exist (it is made), or have an administrator remove that Secret or write the secret in it with kubectl",
					key, wh.Namespace, wh.Name, owner)
			}
		}
		switch {
		case err == nil:
			return made, nil
		case (apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err)) && attempt < 4:
			// Written by someone else between the read and the write:
			// read it again.
			continue
		case apierrors.IsInvalid(err):
			// The API server's words name the Secret's keys, never a value.
			return false, badRequest("the API server refused %s: %s", what, err.Error())
		}
		return false, fmt.Errorf("store %s: %w", what, err)
	}
}

// removedSecretWait bounds the wait for the garbage collector to take a
// removed Webhook's Secret away.
var removedSecretWait = 5 * time.Second

// secretGone waits, at most removedSecretWait, until the Secret key of UID
// uid is gone (or replaced), and says whether it went.
func (h *Handler) secretGone(ctx context.Context, key types.NamespacedName, uid types.UID) bool {
	ctx, cancel := context.WithTimeout(ctx, removedSecretWait)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		sec := &corev1.Secret{}
		err := h.writer.Get(ctx, key, sec)
		if apierrors.IsNotFound(err) || (err == nil && sec.UID != uid) {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
}

// Whose a Webhook's Secret is (secretOwner): the Webhook's, a removed
// Webhook's of the same name, or, described, someone else's.
const (
	ownedByWebhook = "the Webhook's"
	ownedByRemoved = "a removed Webhook's"
)

func secretOwner(sec *corev1.Secret, wh *dotsv1.Webhook) string {
	if c := metav1.GetControllerOf(sec); c != nil {
		switch {
		case c.UID == wh.UID:
			return ownedByWebhook
		case c.Kind == "Webhook" && c.Name == wh.Name && strings.HasPrefix(c.APIVersion, dotsv1.GroupVersion.Group+"/") && len(sec.OwnerReferences) == 1:
			// The Webhook read has this name and another UID: that one
			// is gone, and its Secret is garbage.
			return ownedByRemoved
		}
		return fmt.Sprintf("is controlled by %s %s", c.Kind, c.Name)
	}
	for _, o := range sec.OwnerReferences {
		if o.UID == wh.UID {
			return ownedByWebhook
		}
	}
	if len(sec.OwnerReferences) == 0 {
		return "is owned by nothing (made by hand)"
	}
	return fmt.Sprintf("is owned by %s %s", sec.OwnerReferences[0].Kind, sec.OwnerReferences[0].Name)
}

// webhookSecret is a new Secret of wh holding secret, owned by wh (gone
// with it).
func webhookSecret(wh *dotsv1.Webhook, secret string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: wh.Namespace, Name: wh.Spec.SecretRef.Name,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: dotsv1.GroupVersion.String(), Kind: "Webhook", Name: wh.Name, UID: wh.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{wh.Spec.SecretRef.SecretKey(): []byte(secret)},
	}
}
