package controllers

import (
	"context"
	"fmt"
	"os"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
)

// embeddedPrefix begins the leader identity of a server on the embedded API
// server. At most one such server runs per database (it holds the
// database's advisory lock), so a Lease still held by an embedded identity
// when one starts belongs to a server that was killed: it is released at
// once instead of waited out.
const embeddedPrefix = "embedded/"

// leaderLock is the central controllers' leader Lease, held as identity.
func leaderLock(cfg *rest.Config, identity string) (resourcelock.Interface, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: dotsv1.SystemNamespace, Name: LeaderElectionID},
		Client:     cs.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
	}, nil
}

// leaderIdentity names this process: its host name and a unique id, after
// embeddedPrefix on the embedded API server.
func leaderIdentity(embedded bool) string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown"
	}
	id := host + "_" + string(uuid.NewUUID())
	if embedded {
		id = embeddedPrefix + id
	}
	return id
}

// releaseStaleEmbedded frees the leader Lease when it is held by another
// embedded identity (see embeddedPrefix).
func releaseStaleEmbedded(ctx context.Context, cfg *rest.Config, identity string) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	leases := cs.CoordinationV1().Leases(dotsv1.SystemNamespace)
	l, err := leases.Get(ctx, LeaderElectionID, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read the leader Lease: %w", err)
	}
	if h := l.Spec.HolderIdentity; h == nil || !strings.HasPrefix(*h, embeddedPrefix) || *h == identity {
		return nil
	}
	l.Spec.HolderIdentity = nil
	if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) {
		return fmt.Errorf("release the leader Lease of a server that is gone: %w", err)
	}
	return nil
}
