package computer

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/hostagent/driver"
	"github.com/invisible-dots/invisible-dots/hostagent/driver/fake"
	"github.com/invisible-dots/invisible-dots/internal/home"
)

// readyDot is the Dot owning Computer name, READY (its engine's AgentReady
// true), and the Computer made its own.
func readyDot(comp *dotsv1.Computer) *dotsv1.Dot {
	dot := &dotsv1.Dot{ObjectMeta: metav1.ObjectMeta{Name: comp.Name, Namespace: comp.Namespace, UID: types.UID("dot-" + comp.Name)}}
	dot.Status.Conditions = []metav1.Condition{{Type: dotsv1.AgentReadyCondition, Status: metav1.ConditionTrue, Reason: "Ready", LastTransitionTime: metav1.NewTime(testNow)}}
	yes := true
	comp.OwnerReferences = []metav1.OwnerReference{{APIVersion: dotsv1.GroupVersion.String(), Kind: "Dot", Name: dot.Name, UID: dot.UID, Controller: &yes}}
	return dot
}

// leaveReady is what the guest link does once the Computer is not Ready.
func leaveReady(t *testing.T, c client.Client, name string) {
	t.Helper()
	dot := &dotsv1.Dot{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: name}, dot); err != nil {
		t.Fatal(err)
	}
	meta.SetStatusCondition(&dot.Status.Conditions, metav1.Condition{Type: dotsv1.AgentReadyCondition, Status: metav1.ConditionFalse, Reason: "ComputerNotReady"})
	if err := c.Update(context.Background(), dot); err != nil {
		t.Fatal(err)
	}
}

// TestEveryStopLeavesReadyFirst: a person's stop, a reboot and a delete of
// a VM whose Dot is READY do not power it off (or kill it) until the Dot left
// READY (ref 9.3, 9.5).
func TestEveryStopLeavesReadyFirst(t *testing.T) {
	tests := map[string]struct {
		reason string
		ask    func(t *testing.T, c client.Client, comp *dotsv1.Computer)
		// calls is the driver method that must wait for the Dot.
		calls string
	}{
		"person's stop": {
			reason: "Halted powers off only after the Dot left READY",
			ask: func(t *testing.T, c client.Client, comp *dotsv1.Computer) {
				comp.Spec.RunStrategy = dotsv1.RunHalted
				if err := c.Update(context.Background(), comp); err != nil {
					t.Fatal(err)
				}
			},
			calls: "Poweroff",
		},
		"reboot": {
			reason: "a reboot powers off only after the Dot left READY",
			ask: func(t *testing.T, c client.Client, comp *dotsv1.Computer) {
				metav1.SetMetaDataAnnotation(&comp.ObjectMeta, dotsv1.RebootRequestedAnnotation, "1")
				if err := c.Update(context.Background(), comp); err != nil {
					t.Fatal(err)
				}
			},
			calls: "Poweroff",
		},
		"delete": {
			reason: "a delete destroys the VM only after the Dot left READY",
			ask: func(t *testing.T, c client.Client, comp *dotsv1.Computer) {
				if err := c.Delete(context.Background(), comp); err != nil {
					t.Fatal(err)
				}
			},
			calls: "Destroy",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			h := fake.NewHost()
			h.PoweroffTakes = time.Hour
			comp := testComputer("r", dotsv1.RunOnDemand)
			dot := readyDot(comp)
			r, c := newTestReconciler(h, comp, dot)
			reconcileOnce(t, r, "r")
			if got := getComputer(c, "r"); got.Status.State != dotsv1.ComputerRunning {
				t.Fatalf("not running after the start: %s", got.Status.State)
			}
			tc.ask(t, c, getComputer(c, "r"))
			reconcileOnce(t, r, "r")
			got := getComputer(c, "r")
			if n := h.Calls(tc.calls); n != 0 {
				t.Fatalf("%s\n%s called %d times while the Dot is still READY; want none", tc.reason, tc.calls, n)
			}
			if cond := meta.FindStatusCondition(got.Status.Conditions, dotsv1.ReadyCondition); cond == nil || cond.Status != metav1.ConditionFalse {
				t.Errorf("%s\nReady %+v while the Dot leaves READY; want False, so the guest link takes the Dot out", tc.reason, cond)
			}
			leaveReady(t, c, "r")
			reconcileOnce(t, r, "r")
			if n := h.Calls(tc.calls); n != 1 {
				t.Errorf("%s\n%s called %d times once the Dot left READY; want 1", tc.reason, tc.calls, n)
			}
		})
	}
}

// TestIdleStopCalledOffWhenWorkArrives: a VM going to sleep whose guest was
// not told anything yet goes back to RUNNING when work asks for a start;
// prepare-sleep and the poweroff never happen.
func TestIdleStopCalledOffWhenWorkArrives(t *testing.T) {
	h := fake.NewHost()
	comp := testComputer("i", dotsv1.RunOnDemand)
	dot := readyDot(comp)
	r, c := newTestReconciler(h, comp, dot)
	reconcileOnce(t, r, "i")
	asleep := getComputer(c, "i")
	metav1.SetMetaDataAnnotation(&asleep.ObjectMeta, dotsv1.SleepRequestedAnnotation, "1")
	if err := c.Update(context.Background(), asleep); err != nil {
		t.Fatal(err)
	}
	reconcileOnce(t, r, "i")
	if got := getComputer(c, "i"); got.Status.State != dotsv1.ComputerStopping || got.Status.StopReason != dotsv1.StopIdle {
		t.Fatalf("after the sleep request: state %s, reason %q; want STOPPING idle, leaving READY", got.Status.State, got.Status.StopReason)
	}
	leaveReady(t, c, "i")
	woken := getComputer(c, "i")
	metav1.SetMetaDataAnnotation(&woken.ObjectMeta, dotsv1.StartRequestedAnnotation, "2")
	if err := c.Update(context.Background(), woken); err != nil {
		t.Fatal(err)
	}
	reconcileOnce(t, r, "i")
	got := getComputer(c, "i")
	if got.Status.State != dotsv1.ComputerRunning || got.Status.StopReason != "" || got.Status.StopDeadline != nil {
		t.Errorf("work arrived before the poweroff: state %s, reason %q, deadline %v; want RUNNING again, no stop", got.Status.State, got.Status.StopReason, got.Status.StopDeadline)
	}
	if h.Calls("PrepareSleep") != 0 || h.Calls("Poweroff") != 0 {
		t.Errorf("prepare-sleep %d, poweroff %d; want neither", h.Calls("PrepareSleep"), h.Calls("Poweroff"))
	}
	if got.Status.HandledStartRequest != "2" {
		t.Errorf("handled start request %q; want the one that called the sleep off", got.Status.HandledStartRequest)
	}
}

// TestPrepareSleepHasTheEnginesMinute: the engine's prepare-sleep is given
// ref 5.3's 60 s (its tools' 20 s grace and its browsers' close), not less.
func TestPrepareSleepHasTheEnginesMinute(t *testing.T) {
	h := fake.NewHost()
	var given time.Duration
	drv := fake.DriverFns{
		ObserveFn: h.Observe, StartFn: h.Start, HealthFn: h.Health, PoweroffFn: h.Poweroff, KillFn: h.Kill,
		PrepareSleepFn: func(ctx context.Context, _ home.VMID, _ string) error {
			dl, _ := ctx.Deadline()
			given = time.Until(dl)
			return nil
		},
	}
	comp := testComputer("p", dotsv1.RunOnDemand)
	r, c := newTestReconciler(drv, comp)
	reconcileOnce(t, r, "p")
	asleep := getComputer(c, "p")
	metav1.SetMetaDataAnnotation(&asleep.ObjectMeta, dotsv1.SleepRequestedAnnotation, "1")
	if err := c.Update(context.Background(), asleep); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2 && given == 0; i++ {
		reconcileOnce(t, r, "p") // no Dot: nothing is READY, it powers off
	}
	if given < 59*time.Second || given > 60*time.Second {
		t.Errorf("prepare-sleep was given %v; want ref 5.3's 60 s", given)
	}
}

// TestQEMUThatNeverListensIsKilled: a QEMU whose guest port never accepts
// is killed 30 s after its start with its log in the error, and its start
// counts; a QEMU that listens while its guest is slow to boot is not (the
// 5-minute start timeout is the guest's).
func TestQEMUThatNeverListensIsKilled(t *testing.T) {
	for name, tc := range map[string]struct {
		reason       string
		notListening bool
		wantKilled   bool
	}{
		"never listens": {reason: "QEMU stuck before its network is killed after 30 s", notListening: true, wantKilled: true},
		"guest slow":    {reason: "a listening QEMU whose guest has not answered in 31 s is left to boot"},
	} {
		t.Run(name, func(t *testing.T) {
			started := testNow
			killed := false
			drv := fake.DriverFns{
				ObserveFn: func(context.Context, home.VMID) (driver.Observation, error) {
					if killed {
						return driver.Observation{Provisioned: true, State: driver.Stopped}, nil
					}
					return driver.Observation{Provisioned: true, State: driver.Running, PID: 9, GuestPort: 9000, StartedAt: started,
						NotListening: tc.notListening, LogTail: "qemu: stuck before its network"}, nil
				},
				KillFn: func(context.Context, home.VMID) (driver.KillResult, error) {
					killed = true
					return driver.KillResult{WasRunning: true, Gone: true}, nil
				},
				HealthFn: func(context.Context, home.VMID, string) (driverHealth, error) { return driverHealth{}, errNotUp },
			}
			comp := testComputer("q", dotsv1.RunAlways)
			comp.Status.State = dotsv1.ComputerStarting
			r, c := newTestReconciler(drv, comp)
			clk := r.Clock.(*clocktesting.FakePassiveClock)
			clk.SetTime(testNow.Add(29 * time.Second))
			reconcileOnce(t, r, "q")
			if killed {
				t.Fatalf("%s\nkilled 29 s after its start; want 30 s", tc.reason)
			}
			clk.SetTime(testNow.Add(31 * time.Second))
			reconcileOnce(t, r, "q")
			got := getComputer(c, "q")
			if killed != tc.wantKilled {
				t.Fatalf("%s\nkilled %v at 31 s; want %v", tc.reason, killed, tc.wantKilled)
			}
			if !tc.wantKilled {
				return
			}
			f := got.Status.StartFailure
			if f == nil || f.ConsecutiveFailCount != 1 || !strings.Contains(f.Message, "did not listen") || !strings.Contains(f.Message, "stuck before its network") {
				t.Errorf("startFailure %+v; want one failure saying QEMU did not listen, with its log", f)
			}
			cond := meta.FindStatusCondition(got.Status.Conditions, dotsv1.ReadyCondition)
			if got.Status.State != dotsv1.ComputerStopped || cond == nil || cond.Reason != dotsv1.StartFailedReason || !strings.Contains(cond.Message, "stuck before its network") {
				t.Errorf("state %s, Ready %+v; want STOPPED, StartFailed with QEMU's log", got.Status.State, cond)
			}
		})
	}
}

// TestQEMUThatOutlivesSIGKILLIsError: a QEMU killed at its stop's deadline
// that still runs 10 s later turns the Computer ERROR with the reason, is
// killed again, and the stop ends when it goes.
func TestQEMUThatOutlivesSIGKILLIsError(t *testing.T) {
	gone := false
	kills := 0
	drv := fake.DriverFns{
		ObserveFn: func(context.Context, home.VMID) (driver.Observation, error) {
			if gone {
				return driver.Observation{Provisioned: true, State: driver.Stopped, Exited: true}, nil
			}
			return driver.Observation{Provisioned: true, State: driver.Running, PID: 11, GuestPort: 9100, StartedAt: testNow.Add(-time.Hour)}, nil
		},
		KillFn: func(context.Context, home.VMID) (driver.KillResult, error) {
			kills++
			return driver.KillResult{WasRunning: !gone, Gone: gone}, nil
		},
	}
	comp := testComputer("k", dotsv1.RunHalted)
	comp.Status.State = dotsv1.ComputerStopping
	comp.Status.StopReason = dotsv1.StopUser
	comp.Status.PoweroffTime = &metav1.Time{Time: testNow.Add(-60 * time.Second)}
	comp.Status.StopDeadline = &metav1.Time{Time: testNow}
	r, c := newTestReconciler(drv, comp)
	clk := r.Clock.(*clocktesting.FakePassiveClock)

	reconcileOnce(t, r, "k") // the deadline: killed
	if got := getComputer(c, "k"); got.Status.State != dotsv1.ComputerStopping || kills != 1 {
		t.Fatalf("at the deadline: state %s, %d kills; want STOPPING and one kill", got.Status.State, kills)
	}
	clk.SetTime(testNow.Add(9 * time.Second))
	reconcileOnce(t, r, "k")
	if got := getComputer(c, "k"); got.Status.State != dotsv1.ComputerStopping {
		t.Fatalf("9 s after the kill: state %s; want STOPPING still", got.Status.State)
	}
	clk.SetTime(testNow.Add(10 * time.Second))
	reconcileOnce(t, r, "k")
	got := getComputer(c, "k")
	cond := meta.FindStatusCondition(got.Status.Conditions, dotsv1.ReadyCondition)
	if got.Status.State != dotsv1.ComputerError || cond == nil || cond.Reason != dotsv1.VMErrorReason || !strings.Contains(cond.Message, "has not exited") {
		t.Fatalf("10 s after the kill: state %s, Ready %+v; want ERROR saying QEMU outlived its SIGKILL", got.Status.State, cond)
	}
	clk.SetTime(testNow.Add(11 * time.Second))
	reconcileOnce(t, r, "k")
	if got := getComputer(c, "k"); got.Status.State != dotsv1.ComputerError || kills < 4 {
		t.Errorf("still there: state %s, %d kills; want ERROR and the kill tried again", got.Status.State, kills)
	}
	gone = true
	reconcileOnce(t, r, "k")
	if got := getComputer(c, "k"); got.Status.State != dotsv1.ComputerStopped || got.Status.StopReason != dotsv1.StopUser {
		t.Errorf("once QEMU is gone: state %s, reason %q; want STOPPED for the person", got.Status.State, got.Status.StopReason)
	}
}

type driverHealth = protocol.HealthResponse

var errNotUp = errorString("guest not answering")

type errorString string

func (e errorString) Error() string { return string(e) }

// TestPrepareSleepDoesNotHoldAWorker: an engine that takes its time to
// prepare (a tool finishing, browsers closing) does not hold a reconcile
// for it: the Computer stays STOPPING, saying so, and is powered off once
// the engine answered.
func TestPrepareSleepDoesNotHoldAWorker(t *testing.T) {
	h := fake.NewHost()
	release := make(chan struct{})
	drv := fake.DriverFns{
		ObserveFn: h.Observe, StartFn: h.Start, HealthFn: h.Health, PoweroffFn: h.Poweroff, KillFn: h.Kill,
		PrepareSleepFn: func(ctx context.Context, _ home.VMID, _ string) error {
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		},
	}
	comp := testComputer("w", dotsv1.RunOnDemand)
	r, c := newTestReconciler(drv, comp)
	reconcileOnce(t, r, "w")
	asleep := getComputer(c, "w")
	metav1.SetMetaDataAnnotation(&asleep.ObjectMeta, dotsv1.SleepRequestedAnnotation, "1")
	if err := c.Update(context.Background(), asleep); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	reconcileOnce(t, r, "w")
	if took := time.Since(began); took > 10*time.Second {
		t.Fatalf("the reconcile waited %v for the engine", took)
	}
	got := getComputer(c, "w")
	cond := meta.FindStatusCondition(got.Status.Conditions, dotsv1.ReadyCondition)
	if got.Status.State != dotsv1.ComputerStopping || got.Status.PoweroffTime != nil || cond == nil || !strings.Contains(cond.Message, "engine prepares") {
		t.Fatalf("while the engine prepares: state %s, poweroff %v, Ready %+v; want STOPPING, no poweroff yet, saying the engine prepares", got.Status.State, got.Status.PoweroffTime, cond)
	}
	close(release)
	reconcileOnce(t, r, "w")
	if got := getComputer(c, "w"); got.Status.State != dotsv1.ComputerStopped || got.Status.StopReason != dotsv1.StopIdle || h.Calls("Poweroff") != 1 {
		t.Errorf("once the engine prepared: state %s, reason %q, %d poweroffs; want the guest asked once and asleep", got.Status.State, got.Status.StopReason, h.Calls("Poweroff"))
	}
}
