package dotsapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/internal/channels"
	"github.com/invisible-dots/invisible-dots/internal/channels/hub"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
)

// The subresource of a Dot's channels: dots-viewer may get which kinds the
// server runs, dots-editor also add Channels, make pairing codes and
// unpair people.
const channelsSubresource = "channels"

// maxToken bounds a token a body may give (a Telegram bot token is about 46
// characters).
const maxToken = 256

// listChannelKinds answers which channel types the server runs.
func (h *Handler) listChannelKinds(w http.ResponseWriter, r *http.Request) error {
	d, err := h.dotOf(r, "get", channelsSubresource)
	if err != nil {
		return err
	}
	if len(r.URL.Query()) > 0 {
		return badRequest("the channel kinds take no query parameters")
	}
	out := wire.ChannelKinds{Dot: d.Name, Available: []wire.ChannelKind{}}
	for _, t := range h.channelKinds.Types() {
		out.Available = append(out.Available, wire.ChannelKind{Type: t, Name: wire.ChannelKindName(t), LinkedBy: h.channelKinds[t].LinkedBy})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// kindOf is the kind of channel typ names, when the server runs it.
func (h *Handler) kindOf(typ string) (hub.Kind, error) {
	if k, ok := h.channelKinds[typ]; ok {
		return k, nil
	}
	if typ == string(dotsv1.ChannelWhatsApp) {
		return hub.Kind{}, apiErrorf(http.StatusBadRequest, wire.CodeChannelOff, "%s", hub.WhatsAppOff)
	}
	return hub.Kind{}, badRequest("type %q is not a channel this server runs (it runs: %s)", typ, strings.Join(h.channelKinds.Types(), ", "))
}

// checkToken asks the service who token is, in the route's words.
func checkToken(ctx context.Context, k hub.Kind, token string) (channels.Account, error) {
	if token == "" {
		return channels.Account{}, badRequest("a %s channel needs its token (from @BotFather for Telegram)", wire.ChannelKindName(k.Type))
	}
	if len(token) > maxToken || strings.IndexFunc(token, func(r rune) bool { return r > unicode.MaxASCII || !unicode.IsPrint(r) }) >= 0 {
		return channels.Account{}, apiErrorf(http.StatusBadRequest, wire.CodeInvalidCredentials, "the token is not one a %s bot has (printable ASCII, at most %d characters): copy it again", wire.ChannelKindName(k.Type), maxToken)
	}
	acc, err := k.Check(ctx, token)
	switch {
	case errors.Is(err, channels.ErrInvalidCredentials):
		return acc, apiErrorf(http.StatusBadRequest, wire.CodeInvalidCredentials, "%s", channels.Scrub(err.Error(), token))
	case err != nil:
		return acc, apiErrorf(http.StatusBadGateway, wire.CodeChannelUnreachable, "%s", channels.Scrub(err.Error(), token))
	}
	return acc, nil
}

// accountInUse refuses an account another Channel than self uses, in any
// namespace: one bot serves one Dot (two pollers on a token take turns
// failing).
func (h *Handler) accountInUse(ctx context.Context, typ string, acc channels.Account, self client.ObjectKey) error {
	var list dotsv1.ChannelList
	if err := h.writer.List(ctx, &list, client.MatchingLabels{dotsv1.ChannelAccountLabel: dotsv1.ChannelAccountValue(dotsv1.ChannelType(typ), acc.ID)}); err != nil {
		return fmt.Errorf("look for a Channel of the same account: %w", err)
	}
	for _, c := range list.Items {
		if client.ObjectKeyFromObject(&c) != self {
			return apiErrorf(http.StatusConflict, wire.CodeAccountInUse, "the bot @%s already serves another Dot's Channel (%s/%s): a bot serves one Dot, so make a new bot with @BotFather, or remove that Channel first", acc.Name, c.Namespace, c.Name)
		}
	}
	return nil
}

// addChannel links a Dot to a channel account: credentials checked, then
// the Channel and the Secret it owns.
func (h *Handler) addChannel(w http.ResponseWriter, r *http.Request) error {
	d, err := h.dotOf(r, "create", channelsSubresource)
	if err != nil {
		return err
	}
	if len(r.URL.Query()) > 0 {
		return badRequest("adding a channel takes no query parameters")
	}
	if h.writer == nil {
		return apiErrorf(http.StatusNotImplemented, wire.CodeNotImplemented, "this server does not add channels")
	}
	var body wire.ChannelAdd
	if err := decode(w, r, wire.MaxChannelBody, &body); err != nil {
		return err
	}
	k, err := h.kindOf(body.Type)
	if err != nil {
		return err
	}
	if d.DeletionTimestamp != nil {
		return apiErrorf(http.StatusConflict, wire.CodeDotDeleting, "Dot %s/%s is being deleted", d.Namespace, d.Name)
	}
	ch := &dotsv1.Channel{ObjectMeta: metav1.ObjectMeta{Namespace: d.Namespace, Name: dotsv1.ChannelName(d.Name, dotsv1.ChannelType(body.Type))}}
	key := client.ObjectKeyFromObject(ch)
	if err := h.writer.Get(r.Context(), key, &dotsv1.Channel{}); err == nil {
		return apiErrorf(http.StatusConflict, wire.CodeAlreadyExists, "Dot %s has a %s channel already (%s): give it a new token with PUT .../channels/%s/credentials, or remove it first", d.Name, wire.ChannelKindName(body.Type), ch.Name, ch.Name)
	} else if !apierrors.IsNotFound(err) {
		return fmt.Errorf("read Channel %s: %w", key, err)
	}
	var acc channels.Account
	if k.LinkedBy == hub.LinkedByToken {
		if acc, err = checkToken(r.Context(), k, body.Token); err != nil {
			return err
		}
		if err := h.accountInUse(r.Context(), body.Type, acc, key); err != nil {
			return err
		}
		ch.Labels = map[string]string{dotsv1.ChannelAccountLabel: dotsv1.ChannelAccountValue(dotsv1.ChannelType(body.Type), acc.ID)}
		ch.Spec.CredentialsSecretName = dotsv1.ChannelCredentialsSecretName(ch.Name)
	} else if body.Token != "" {
		return badRequest("a %s channel is linked by scanning a code, not with a token", wire.ChannelKindName(body.Type))
	}
	ch.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: dotsv1.GroupVersion.String(), Kind: "Dot", Name: d.Name, UID: d.UID, BlockOwnerDeletion: ptr.To(true),
	}}
	ch.Spec.DotName, ch.Spec.Type = d.Name, dotsv1.ChannelType(body.Type)
	if s := body.Settings; s != nil {
		ch.Spec.Settings = dotsv1.ChannelSettings{Approvals: s.Approvals, NotifyTasks: s.NotifyTasks, ShowArguments: s.ShowArguments}
	}
	if err := h.writer.Create(r.Context(), ch); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return apiErrorf(http.StatusConflict, wire.CodeAlreadyExists, "Dot %s has a %s channel already (%s)", d.Name, wire.ChannelKindName(body.Type), ch.Name)
		}
		if apierrors.IsInvalid(err) {
			return badRequest("%s", err.Error())
		}
		return fmt.Errorf("create Channel %s: %w", key, err)
	}
	if k.LinkedBy == hub.LinkedByCode && h.channelLinks != nil {
		// Its link starts now: whoever watches waits for its first code.
		h.channelLinks.Begin(string(ch.UID))
	}
	if k.LinkedBy == hub.LinkedByToken {
		if err := h.writeCredentials(r.Context(), ch, body.Token, acc, true); err != nil {
			// Nothing half made stays: the Channel goes, and the Secret
			// with it (it is the Channel's).
			_ = h.writer.Delete(context.WithoutCancel(r.Context()), ch)
			return err
		}
	}
	writeJSON(w, http.StatusCreated, wire.ChannelLinked{Namespace: ch.Namespace, Name: ch.Name, Type: body.Type, Account: wire.ChannelAccount{ID: acc.ID, Name: acc.Name}})
	return nil
}

// writeCredentials stores the token in the Channel's Secret (owned by the
// Channel, so it goes with it) and the account in its status, which the
// hub reads when it starts the link.
func (h *Handler) writeCredentials(ctx context.Context, ch *dotsv1.Channel, token string, acc channels.Account, create bool) error {
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ch.Namespace, Name: ch.Spec.CredentialsSecretName}}
	own := metav1.OwnerReference{
		APIVersion: dotsv1.GroupVersion.String(), Kind: "Channel", Name: ch.Name, UID: ch.UID,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
	}
	var err error
	if create {
		sec.OwnerReferences = []metav1.OwnerReference{own}
		sec.Type = corev1.SecretTypeOpaque
		sec.Data = map[string][]byte{dotsv1.ChannelCredentialsKey: []byte(token)}
		err = h.writer.Create(ctx, sec)
	} else {
		err = h.writer.Get(ctx, client.ObjectKeyFromObject(sec), sec)
		switch {
		case apierrors.IsNotFound(err):
			sec.OwnerReferences = []metav1.OwnerReference{own}
			sec.Data = map[string][]byte{dotsv1.ChannelCredentialsKey: []byte(token)}
			err = h.writer.Create(ctx, sec)
		case err == nil:
			if !metav1.IsControlledBy(sec, ch) {
				return apiErrorf(http.StatusConflict, wire.CodeAlreadyExists, "the Secret %s/%s is not this Channel's: remove it, or remove the Channel and add it again", sec.Namespace, sec.Name)
			}
			if sec.Data == nil {
				sec.Data = map[string][]byte{}
			}
			sec.Data[dotsv1.ChannelCredentialsKey] = []byte(token)
			err = h.writer.Update(ctx, sec)
		}
	}
	if err != nil {
		return fmt.Errorf("store the credentials of Channel %s/%s: %w", ch.Namespace, ch.Name, err)
	}
	// The link starts again with them, even when they are the same.
	given := ch.DeepCopy()
	if ch.Annotations == nil {
		ch.Annotations = map[string]string{}
	}
	ch.Annotations[dotsv1.ChannelCredentialsAnnotation] = h.clock.Now().UTC().Format(time.RFC3339Nano)
	if err := h.writer.Patch(ctx, ch, client.MergeFrom(given)); err != nil {
		return fmt.Errorf("mark the new credentials of Channel %s/%s: %w", ch.Namespace, ch.Name, err)
	}
	base := ch.DeepCopy()
	ch.Status.Account = &dotsv1.ChannelAccount{ID: acc.ID, Name: acc.Name}
	ch.Status.State, ch.Status.Detail = dotsv1.ChannelConnecting, ""
	if err := h.writer.Status().Patch(ctx, ch, client.MergeFrom(base)); err != nil {
		return fmt.Errorf("write the account of Channel %s/%s: %w", ch.Namespace, ch.Name, err)
	}
	return nil
}

// channelOf is the Channel a channel route names, once the caller may verb
// the Dot's channels; it must be that Dot's.
func (h *Handler) channelOf(r *http.Request, verb string) (*dotsv1.Dot, *dotsv1.Channel, error) {
	d, err := h.dotOf(r, verb, channelsSubresource)
	if err != nil {
		return nil, nil, err
	}
	if h.writer == nil {
		return nil, nil, apiErrorf(http.StatusNotImplemented, wire.CodeNotImplemented, "this server does not serve channels")
	}
	name := r.PathValue("channel")
	ch := &dotsv1.Channel{}
	err = h.writer.Get(r.Context(), client.ObjectKey{Namespace: d.Namespace, Name: name}, ch)
	if apierrors.IsNotFound(err) || (err == nil && ch.Spec.DotName != d.Name) {
		return nil, nil, apiErrorf(http.StatusNotFound, wire.CodeNotFound, "Dot %s/%s has no Channel %s (kubectl get channels -n %s lists them)", d.Namespace, d.Name, name, d.Namespace)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read Channel %s/%s: %w", d.Namespace, name, err)
	}
	if ch.DeletionTimestamp != nil {
		return nil, nil, apiErrorf(http.StatusNotFound, wire.CodeNotFound, "Channel %s/%s is being removed", d.Namespace, name)
	}
	return d, ch, nil
}

// putChannelCredentials gives a Channel a new token (the way back from
// needs_relink): checked, then stored; the hub starts the link again with
// its people kept.
func (h *Handler) putChannelCredentials(w http.ResponseWriter, r *http.Request) error {
	_, ch, err := h.channelOf(r, "update")
	if err != nil {
		return err
	}
	if len(r.URL.Query()) > 0 {
		return badRequest("new credentials take no query parameters")
	}
	k, err := h.kindOf(string(ch.Spec.Type))
	if err != nil {
		return err
	}
	if k.LinkedBy != hub.LinkedByToken {
		return badRequest("a %s channel is linked by scanning a code: link it again (GET .../channels/%s/link)", wire.ChannelKindName(k.Type), ch.Name)
	}
	var body wire.ChannelCredentials
	if err := decode(w, r, wire.MaxChannelBody, &body); err != nil {
		return err
	}
	acc, err := checkToken(r.Context(), k, body.Token)
	if err != nil {
		return err
	}
	key := client.ObjectKeyFromObject(ch)
	if err := h.accountInUse(r.Context(), k.Type, acc, key); err != nil {
		return err
	}
	if old := ch.Status.Account; old != nil && old.ID != acc.ID {
		// Another bot: the people paired with the old one never wrote to
		// this one, and it cannot write to them first.
		return badRequest("this token is another bot's (@%s, not @%s): a Channel keeps its bot; remove the Channel and add the new bot instead", acc.Name, old.Name)
	}
	base := ch.DeepCopy()
	ch.Labels = mergeLabels(ch.Labels, dotsv1.ChannelAccountLabel, dotsv1.ChannelAccountValue(dotsv1.ChannelType(k.Type), acc.ID))
	if ch.Spec.CredentialsSecretName == "" {
		ch.Spec.CredentialsSecretName = dotsv1.ChannelCredentialsSecretName(ch.Name)
	}
	if err := h.writer.Patch(r.Context(), ch, client.MergeFrom(base)); err != nil {
		return fmt.Errorf("update Channel %s: %w", key, err)
	}
	if err := h.writeCredentials(r.Context(), ch, body.Token, acc, false); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, wire.ChannelLinked{Namespace: ch.Namespace, Name: ch.Name, Type: k.Type, Account: wire.ChannelAccount{ID: acc.ID, Name: acc.Name}})
	return nil
}

func mergeLabels(l map[string]string, k, v string) map[string]string {
	if l == nil {
		l = map[string]string{}
	}
	l[k] = v
	return l
}

// addPairingCode makes a one-time code that pairs a person with the
// Channel: only its hash is stored.
func (h *Handler) addPairingCode(w http.ResponseWriter, r *http.Request) error {
	d, ch, err := h.channelOf(r, "update")
	if err != nil {
		return err
	}
	if len(r.URL.Query()) > 0 || r.ContentLength > 0 {
		return badRequest("a pairing code takes no query parameters and no body")
	}
	code, hash := channels.NewPairingCode()
	expires := h.clock.Now().Add(channels.PairingCodeLifetime).UTC().Truncate(1e9)
	if err := h.store.AddPairingCode(r.Context(), string(ch.UID), string(d.UID), hash, expires); err != nil {
		return err
	}
	account := ""
	if a := ch.Status.Account; a != nil {
		account = a.Name
	}
	typ := string(ch.Spec.Type)
	writeJSON(w, http.StatusCreated, wire.PairingCode{
		Code: code, ExpiresAt: expires, Words: channels.PairingWords(typ, code), Link: channels.PairingLink(typ, account, code),
	})
	return nil
}

// unpairPerson takes a person's pairing away: nothing they send is heard
// after it, and nothing goes to their chat.
func (h *Handler) unpairPerson(w http.ResponseWriter, r *http.Request) error {
	d, ch, err := h.channelOf(r, "delete")
	if err != nil {
		return err
	}
	if len(r.URL.Query()) > 0 {
		return badRequest("unpairing takes no query parameters")
	}
	id := r.PathValue("id")
	ok, err := h.store.Unpair(r.Context(), string(ch.UID), id)
	if err != nil {
		return err
	}
	if !ok {
		return apiErrorf(http.StatusNotFound, wire.CodeNotFound, "nobody with id %q is paired with Channel %s/%s of Dot %s", id, ch.Namespace, ch.Name, d.Name)
	}
	// The Channel's people in its status follow at the next reconcile:
	// the annotation is what tells the controller now.
	base := ch.DeepCopy()
	if ch.Annotations == nil {
		ch.Annotations = map[string]string{}
	}
	ch.Annotations[dotsv1.ChannelPeopleChangedAnnotation] = h.clock.Now().UTC().Format(time.RFC3339Nano)
	if err := h.writer.Patch(r.Context(), ch, client.MergeFrom(base)); err != nil {
		h.log.Error(err, "the Channel's people in its status are stale until its next reconcile", "channel", client.ObjectKeyFromObject(ch))
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// ChannelLinks are the codes of Channels being linked by scanning a code on
// a phone (WhatsApp), held in memory only (port.Links).
type ChannelLinks interface {
	// Begin starts a new link of the Channel uid.
	Begin(channelUID string)
	// Watch sends the linking of the Channel uid: the code on show now
	// first, then each new one, then linked or failed; it returns after
	// the end, or when ctx ends or send fails.
	Watch(ctx context.Context, channelUID string, send func(wire.ChannelLinkFrame) error) error
}

// linkChannel streams the codes that link a Channel (WhatsApp) as
// server-sent events, never stored: a code is a way into the account while
// it is shown.
func (h *Handler) linkChannel(w http.ResponseWriter, r *http.Request) error {
	_, ch, err := h.channelOf(r, "update")
	if err != nil {
		return err
	}
	if len(r.URL.Query()) > 0 {
		return badRequest("the link stream takes no query parameters")
	}
	k, err := h.kindOf(string(ch.Spec.Type))
	if err != nil {
		return err
	}
	if k.LinkedBy != hub.LinkedByCode {
		return badRequest("a %s channel is linked with its token, not by a code (PUT .../channels/%s/credentials)", wire.ChannelKindName(k.Type), ch.Name)
	}
	if h.channelLinks == nil {
		return apiErrorf(http.StatusBadRequest, wire.CodeChannelOff, "%s", hub.WhatsAppOff)
	}
	flusher, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	if flusher != nil {
		flusher.Flush()
	}
	_ = h.channelLinks.Watch(r.Context(), string(ch.UID), func(f wire.ChannelLinkFrame) error {
		data, _ := json.Marshal(f)
		if _, err := fmt.Fprintf(w, "data: %s\n\n", data); err != nil {
			return err
		}
		if flusher != nil {
			flusher.Flush()
		}
		return nil
	})
	return nil
}
