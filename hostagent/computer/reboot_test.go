package computer

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/hostagent/driver"
	"github.com/invisible-dots/invisible-dots/hostagent/driver/fake"
	"github.com/invisible-dots/invisible-dots/internal/home"
	"github.com/invisible-dots/invisible-dots/internal/lifecycle"
)

// rebootFleet is the 20 Computers of TestHostRebootFaked, by what they
// were and whether their Dot has work.
var rebootFleet = []struct {
	kind     string
	count    int
	strategy dotsv1.RunStrategy
	// asleep: stopped before the reboot, for this reason.
	asleep dotsv1.StopReason
	work   bool
	// comeBack: RUNNING again after the reboot; else STOPPED with stop.
	comeBack bool
	stop     dotsv1.StopReason
}{
	{kind: "always", count: 6, strategy: dotsv1.RunAlways, comeBack: true},
	{kind: "working", count: 6, strategy: dotsv1.RunOnDemand, work: true, comeBack: true},
	{kind: "idle", count: 4, strategy: dotsv1.RunOnDemand, stop: dotsv1.StopExited},
	{kind: "asleep", count: 2, strategy: dotsv1.RunOnDemand, asleep: dotsv1.StopIdle, stop: dotsv1.StopIdle},
	{kind: "halted", count: 2, strategy: dotsv1.RunHalted, asleep: dotsv1.StopUser, stop: dotsv1.StopUser},
}

// wakeForWork is the control plane's part (the power controller): the real
// lifecycle decision on each Computer, its Wake applied as the start
// request it writes. Named for what it stands in for; the Dot's work is
// the test's.
func wakeForWork(t *testing.T, c client.Client, name string, work bool, now time.Time) {
	t.Helper()
	comp := getComputer(c, name)
	f := lifecycle.Facts{Strategy: comp.Spec.RunStrategy, State: comp.Status.State, StopReason: comp.Status.StopReason,
		Phase: dotsv1.DotIdle, AgentState: "IDLE", Now: now, LastActivity: now}
	if work {
		f.Work.ActiveTask = true
	}
	if lifecycle.Decide(f).Action != lifecycle.Wake || comp.RequestPending(dotsv1.StartRequestedAnnotation, comp.Status.HandledStartRequest) {
		return
	}
	metav1.SetMetaDataAnnotation(&comp.ObjectMeta, dotsv1.StartRequestedAnnotation, now.Format(time.RFC3339Nano))
	if err := c.Update(context.Background(), comp); err != nil {
		t.Fatal(err)
	}
}

// TestHostRebootFaked: the host restarts under 20 Computers (a new boot id,
// every qemu.json stale, every QEMU gone). Every Always Computer and every
// one whose Dot has work comes back RUNNING and Ready; the others stay
// STOPPED with the right stop reason (exited for those that ran, the
// reason they had for those asleep or stopped by a person), within a
// bounded number of reconciles. The recovery time is reported, not
// asserted.
func TestHostRebootFaked(t *testing.T) {
	h := fake.NewHost()
	var objs []client.Object
	type member struct {
		name string
		kind int
	}
	var fleet []member
	for k, f := range rebootFleet {
		for i := range f.count {
			name := fmt.Sprintf("%s-%d", f.kind, i)
			comp := testComputer(name, f.strategy)
			if f.asleep != "" {
				comp.Status.State, comp.Status.StopReason = dotsv1.ComputerStopped, f.asleep
			}
			objs = append(objs, comp)
			fleet = append(fleet, member{name, k})
		}
	}
	if len(fleet) != 20 {
		t.Fatalf("the fleet has %d Computers; want 20", len(fleet))
	}
	r, c := newTestReconciler(h, objs...)
	clk := r.Clock.(*clocktesting.FakePassiveClock)
	for _, m := range fleet {
		reconcileOnce(t, r, m.name)
	}
	before := 0
	for _, m := range fleet {
		if getComputer(c, m.name).Status.State == dotsv1.ComputerRunning {
			before++
		}
	}
	if want := 6 + 6 + 4; before != want {
		t.Fatalf("%d Computers RUNNING before the reboot; want %d", before, want)
	}

	h.RebootHost()
	clk.SetTime(testNow.Add(time.Minute))
	start := time.Now()
	const maxRounds = 5
	rounds := 0
	for ; rounds < maxRounds; rounds++ {
		back := 0
		for _, m := range fleet {
			reconcileOnce(t, r, m.name)
			wakeForWork(t, c, m.name, rebootFleet[m.kind].work, clk.Now())
			if getComputer(c, m.name).Status.State == dotsv1.ComputerRunning {
				back++
			}
		}
		if back == 12 {
			rounds++
			break
		}
	}
	took := time.Since(start)

	want := map[string]string{}
	got := map[string]string{}
	wanted, cameBack := 0, 0
	for _, m := range fleet {
		f := rebootFleet[m.kind]
		comp := getComputer(c, m.name)
		got[m.name] = fmt.Sprintf("%s/%s", comp.Status.State, comp.Status.StopReason)
		if f.comeBack {
			wanted++
			want[m.name] = string(dotsv1.ComputerRunning) + "/"
			if comp.Status.State == dotsv1.ComputerRunning && comp.Status.HostBootID == "boot-1+" {
				cameBack++
			}
		} else {
			want[m.name] = fmt.Sprintf("%s/%s", dotsv1.ComputerStopped, f.stop)
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("after the reboot, state/stopReason by Computer -want +got:\n%s", diff)
	}
	if rounds > 3 {
		t.Errorf("recovery took %d passes over the Computers; want at most 3 (observe and restart, wake for work, restart)", rounds)
	}
	if n := len(h.Running()); n != wanted {
		t.Errorf("%d QEMUs run on the host after the reboot; want %d", n, wanted)
	}
	t.Logf("FIGURE host reboot, 20 Computers: %d of %d that should come back are RUNNING (%.0f %%), after %d passes, in %v of reconciling (fake driver)",
		cameBack, wanted, 100*float64(cameBack)/float64(wanted), rounds, took)
}

// TestANewerRuntimeWaitsForARestartAndTheRebootTakesIt (ref 3.3): a running
// VM whose host registers a newer runtime ISO says so in RuntimeCurrent,
// with the command that applies it; a reboot starts it on the newest, which
// its guest reports. A pinned runtime is never replaced.
func TestANewerRuntimeWaitsForARestartAndTheRebootTakesIt(t *testing.T) {
	h := fake.NewHost()
	old, newer := "20261201T000000Z-aaaa", "20261204T000000Z-bbbb"
	h.SetImages([]driver.Image{{Kind: home.Golden, Version: "g1"}, {Kind: home.Runtime, Version: old}})
	r, c := newTestReconciler(h, testComputer("u", dotsv1.RunOnDemand), testComputer("p", dotsv1.RunOnDemand))
	pinned := getComputer(c, "p")
	pinned.Spec.RuntimeImage = old
	if err := c.Update(context.Background(), pinned); err != nil {
		t.Fatal(err)
	}
	condition := func(name string) metav1.Condition {
		got := getComputer(c, name)
		cond := meta.FindStatusCondition(got.Status.Conditions, dotsv1.RuntimeCurrentCondition)
		if cond == nil {
			t.Fatalf("%s has no %s condition: %+v", name, dotsv1.RuntimeCurrentCondition, got.Status.Conditions)
		}
		return *cond
	}
	for _, name := range []string{"u", "p"} {
		reconcileOnce(t, r, name)
	}
	if got := getComputer(c, "u"); got.Status.RuntimeImage != old || got.Status.System == nil || got.Status.System.RuntimeVersion != old {
		t.Fatalf("after the start: runtimeImage %q, system %+v; want %s, reported by the guest", got.Status.RuntimeImage, got.Status.System, old)
	}
	if cond := condition("u"); cond.Status != metav1.ConditionTrue || cond.Reason != dotsv1.RuntimeCurrentReason {
		t.Errorf("on the newest runtime: %+v; want True, %s", cond, dotsv1.RuntimeCurrentReason)
	}

	h.SetImages([]driver.Image{{Kind: home.Golden, Version: "g1"}, {Kind: home.Runtime, Version: old}, {Kind: home.Runtime, Version: newer}})
	for _, name := range []string{"u", "p"} {
		reconcileOnce(t, r, name)
	}
	cond := condition("u")
	if cond.Status != metav1.ConditionFalse || cond.Reason != dotsv1.RuntimeRestartPendingReason ||
		!strings.Contains(cond.Message, newer) || !strings.Contains(cond.Message, "invisible-dots computer reboot u -n default") {
		t.Errorf("a newer runtime registered: %+v; want False, %s, naming %s and the reboot command", cond, dotsv1.RuntimeRestartPendingReason, newer)
	}
	if cond := condition("p"); cond.Status != metav1.ConditionTrue || cond.Reason != dotsv1.RuntimePinnedReason {
		t.Errorf("a pinned runtime: %+v; want True, %s", cond, dotsv1.RuntimePinnedReason)
	}

	comp := getComputer(c, "u")
	before := comp.Status.PID
	metav1.SetMetaDataAnnotation(&comp.ObjectMeta, dotsv1.RebootRequestedAnnotation, "1")
	if err := c.Update(context.Background(), comp); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		reconcileOnce(t, r, "u")
		if got := getComputer(c, "u"); got.Status.State == dotsv1.ComputerRunning && got.Status.PID != before {
			break
		}
	}
	got := getComputer(c, "u")
	if got.Status.PID == before || got.Status.RuntimeImage != newer || got.Status.System == nil || got.Status.System.RuntimeVersion != newer {
		t.Fatalf("after the reboot: pid %d (was %d), runtimeImage %q, system %+v; want a new QEMU on %s, reported by the guest", got.Status.PID, before, got.Status.RuntimeImage, got.Status.System, newer)
	}
	if cond := condition("u"); cond.Status != metav1.ConditionTrue {
		t.Errorf("after the reboot: %+v; want True", cond)
	}
	if got := getComputer(c, "p"); got.Status.RuntimeImage != old {
		t.Errorf("the pinned Computer runs %q; want %s", got.Status.RuntimeImage, old)
	}
}
