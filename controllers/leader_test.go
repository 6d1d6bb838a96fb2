package controllers

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/leaderelection/resourcelock"
	ctrl "sigs.k8s.io/controller-runtime"
)

// fakeLock is a leader lock whose every read and write fails with err.
type fakeLock struct {
	resourcelock.Interface
	err error
}

func (l fakeLock) Get(context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	return nil, nil, l.err
}

func (l fakeLock) Update(context.Context, resourcelock.LeaderElectionRecord) error { return l.err }

// fakeStoppedManager is a manager whose Start returns err at once.
type fakeStoppedManager struct {
	ctrl.Manager
	err error
}

func (m fakeStoppedManager) Start(context.Context) error { return m.err }

func TestALostLeadSaysWhatFailed(t *testing.T) {
	lost := errors.New("leader election lost")
	down := errors.New(`Put "https://127.0.0.1:6443/...": the database is unavailable`)
	lock := &renewals{Interface: fakeLock{err: down}}
	m := leading{Manager: fakeStoppedManager{err: lost}, lock: lock, renewal: time.Minute}

	// Nothing failed yet: the manager's own error, as it is.
	if err := m.Start(context.Background()); err != lost {
		t.Fatalf("with no failed renewal Start = %v, want the manager's own error", err)
	}
	_, _, _ = lock.Get(context.Background())
	_ = lock.Update(context.Background(), resourcelock.LeaderElectionRecord{})
	err := m.Start(context.Background())
	if !errors.Is(err, lost) {
		t.Fatalf("Start = %v, want it to wrap the manager's error", err)
	}
	for _, want := range []string{"could not renew their leader Lease", "1m0s", "the database is unavailable", "start the server again"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Start's error %q does not say %q", err, want)
		}
	}

	// A stop asked for is no failure, whatever the lock last saw.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := m.Start(ctx); err != lost {
		t.Errorf("after a stop Start = %v, want the manager's own error", err)
	}

	// A renewal that worked clears the failure.
	lock.Interface = fakeLock{}
	_, _, _ = lock.Get(context.Background())
	if err := m.Start(context.Background()); err != lost {
		t.Errorf("after a renewal that worked Start = %v, want the manager's own error", err)
	}
}
