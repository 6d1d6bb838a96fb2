package controllers

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	ctrl "sigs.k8s.io/controller-runtime"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
)

// embeddedPrefix begins the leader identity of a server on the embedded API
// server. At most one such server runs per database (it holds the
// database's advisory lock), so a Lease still held by an embedded identity
// when one starts belongs to a server that was killed: it is released at
// once instead of waited out.
const embeddedPrefix = "embedded/"

// leaderLock is the central controllers' leader Lease, held as identity.
func leaderLock(cfg *rest.Config, identity string) (*renewals, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &renewals{Interface: &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: dotsv1.SystemNamespace, Name: LeaderElectionID},
		Client:     cs.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
	}}, nil
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

// renewals is the leader lock that remembers why it last failed, so a
// manager that stops because its Lease ran out can say why (the elector's
// own error says only "leader election lost").
type renewals struct {
	resourcelock.Interface
	mu      sync.Mutex
	lastErr error // the last failed read or write of the Lease; nil after one that worked
}

func (r *renewals) record(err error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lastErr = err
	return err
}

func (r *renewals) failure() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastErr
}

func (r *renewals) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	rec, raw, err := r.Interface.Get(ctx)
	if err != nil && !apierrors.IsNotFound(err) {
		return rec, raw, r.record(err)
	}
	r.record(nil)
	return rec, raw, err
}

func (r *renewals) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	return r.record(r.Interface.Create(ctx, ler))
}

func (r *renewals) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	return r.record(r.Interface.Update(ctx, ler))
}

// leading is a manager whose Start says why the lead was lost: while the
// process runs, the only cause is a Lease it could not renew within the
// renew deadline, and the last error of its lock names what failed.
type leading struct {
	ctrl.Manager
	lock    *renewals
	renewal time.Duration
}

func (m leading) Start(ctx context.Context) error {
	err := m.Manager.Start(ctx)
	if err == nil || ctx.Err() != nil {
		return err
	}
	why := m.lock.failure()
	if why == nil {
		return err
	}
	return fmt.Errorf("the central controllers could not renew their leader Lease %s/%s for %s, so they stop rather than risk acting beside another server (the last attempt: %v); start the server again once its API server answers: %w",
		dotsv1.SystemNamespace, LeaderElectionID, m.renewal, why, err)
}
