package guestlink

import (
	"context"
	"runtime"
	"testing"

	"github.com/google/go-cmp/cmp"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/hostagent/crashpoint"
	"github.com/invisible-dots/invisible-dots/hostagent/guestclient/fakeguest"
)

// TestReadyProcedureKilledBetweenKeyAndConfig: an agent killed after the
// READY procedure pushed the key and before the config leaves the Dot not
// READY (nothing claims the config was applied); the next agent pushes the
// key again (the engine takes the same key as a no-op) and the config, and
// the Dot is READY on this generation: nothing lost, the config pushed once.
func TestReadyProcedureKilledBetweenKeyAndConfig(t *testing.T) {
	var j journal
	objs := []client.Object{testDot(nil), testComputer(true, 1001), tokenSecret(), defaultKeySecret(defaultKey)}
	first, c := newReconciler(t, recording(&j, fakeguest.GuestFns{}), objs...)

	remove := crashpoint.OnHit(crashpoint.ReadyKeyPushed, runtime.Goexit)
	died := make(chan struct{})
	go func() {
		defer close(died)
		_, _ = first.Reconcile(context.Background(), ctrl.Request{NamespacedName: dotKey})
		t.Error("Reconcile returned; it should have died at " + crashpoint.ReadyKeyPushed)
	}()
	<-died
	remove()
	if diff := cmp.Diff([]string{"secrets key=" + defaultKey + " mcp=map[]"}, j.take()); diff != "" {
		t.Fatalf("guest calls before the kill -want +got:\n%s", diff)
	}
	if got := summarize(getDot(t, c))[dotsv1.AgentReadyCondition]; got.Status == "True" {
		t.Fatalf("the Dot is READY after a kill before its config: %+v", got)
	}

	// The restarted agent: the same API and guest, nothing in memory.
	second := &Reconciler{Client: c, APIReader: c, Guest: first.Guest, VMs: first.VMs, HostName: testHost,
		Recorder: first.Recorder, Clock: first.Clock}
	second.init()
	reconcileOnce(t, second)
	if diff := cmp.Diff([]string{"secrets key=" + defaultKey + " mcp=map[]", "config ", "health"}, j.take()); diff != "" {
		t.Errorf("guest calls after the restart -want +got:\n%s", diff)
	}
	if diff := cmp.Diff(ready1, summarize(getDot(t, c))); diff != "" {
		t.Errorf("conditions after the restart -want +got:\n%s", diff)
	}
}
