package computer

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/hostagent/driver/fake"
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

// wakeForWork is the control plane's part (the work controller): the real
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
