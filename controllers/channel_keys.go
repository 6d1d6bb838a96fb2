package controllers

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/internal/channels/port"
)

// channelDeviceKey is the data key of a device's keys in its Secret.
const channelDeviceKey = "device.json"

// ChannelKeys keeps one Channel's device keys in its Secret
// (port.KeyStore): every change is written before the program goes on, and
// a write for a Channel that is gone, or was made again under the same
// name, is refused (port.ErrChannelGone), so a session still open after
// the delete cannot write its keys back.
type ChannelKeys struct {
	Client client.Client
	// Reader reads from the API server, never a cache a step behind.
	Reader client.Reader
	// Namespace, Name and UID are the Channel's.
	Namespace, Name, UID string
}

var _ port.KeyStore = (*ChannelKeys)(nil)

// channel is the Channel, when it is still the one the keys are for.
func (k *ChannelKeys) channel(ctx context.Context) (*dotsv1.Channel, error) {
	ch := &dotsv1.Channel{}
	err := k.Reader.Get(ctx, types.NamespacedName{Namespace: k.Namespace, Name: k.Name}, ch)
	if apierrors.IsNotFound(err) {
		return nil, port.ErrChannelGone
	}
	if err != nil {
		return nil, err
	}
	if string(ch.UID) != k.UID || !ch.DeletionTimestamp.IsZero() {
		return nil, port.ErrChannelGone
	}
	return ch, nil
}

func (k *ChannelKeys) secret(ctx context.Context) (*corev1.Secret, error) {
	sec := &corev1.Secret{}
	err := k.Reader.Get(ctx, types.NamespacedName{Namespace: k.Namespace, Name: dotsv1.ChannelDeviceSecretName(k.Name)}, sec)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return sec, err
}

// Load reads every key; none for a device not linked yet.
func (k *ChannelKeys) Load(ctx context.Context) (port.Keys, error) {
	ch, err := k.channel(ctx)
	if err != nil {
		return nil, err
	}
	sec, err := k.secret(ctx)
	if err != nil || sec == nil {
		return port.Keys{}, err
	}
	if !metav1.IsControlledBy(sec, ch) {
		return nil, fmt.Errorf("the Secret %s/%s is not Channel %s's: remove it and link WhatsApp again", sec.Namespace, sec.Name, k.Name)
	}
	keys := port.Keys{}
	if raw := sec.Data[channelDeviceKey]; len(raw) > 0 {
		if err := json.Unmarshal(raw, &keys); err != nil {
			return nil, fmt.Errorf("the device keys of Channel %s/%s cannot be read: link WhatsApp again", k.Namespace, k.Name)
		}
	}
	return keys, nil
}

// Save applies changes, in order, in one write of the Secret.
func (k *ChannelKeys) Save(ctx context.Context, changes []port.KeyChange) error {
	for attempt := 0; ; attempt++ {
		err := k.saveOnce(ctx, changes)
		if err == nil || !apierrors.IsConflict(err) || attempt == answerAttempts-1 {
			return err
		}
	}
}

func (k *ChannelKeys) saveOnce(ctx context.Context, changes []port.KeyChange) error {
	ch, err := k.channel(ctx)
	if err != nil {
		return err
	}
	sec, err := k.secret(ctx)
	if err != nil {
		return err
	}
	keys := port.Keys{}
	if sec != nil {
		if !metav1.IsControlledBy(sec, ch) {
			return fmt.Errorf("the Secret %s/%s is not Channel %s's: remove it and link WhatsApp again", sec.Namespace, sec.Name, k.Name)
		}
		if raw := sec.Data[channelDeviceKey]; len(raw) > 0 {
			if err := json.Unmarshal(raw, &keys); err != nil {
				return fmt.Errorf("the device keys of Channel %s/%s cannot be read: %w", k.Namespace, k.Name, err)
			}
		}
	}
	keys.Apply(changes)
	raw, err := json.Marshal(keys)
	if err != nil {
		return err
	}
	if sec == nil {
		sec = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: k.Namespace, Name: dotsv1.ChannelDeviceSecretName(k.Name), OwnerReferences: []metav1.OwnerReference{{
				APIVersion: dotsv1.GroupVersion.String(), Kind: "Channel", Name: ch.Name, UID: ch.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}}},
			Type: corev1.SecretTypeOpaque,
			Data: map[string][]byte{channelDeviceKey: raw},
		}
		return k.Client.Create(ctx, sec)
	}
	sec.Data = map[string][]byte{channelDeviceKey: raw}
	// Over the version read: a concurrent write is a Conflict, read again.
	return k.Client.Update(ctx, sec)
}
