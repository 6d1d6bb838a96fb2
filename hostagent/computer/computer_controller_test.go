package computer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	clientfake "sigs.k8s.io/controller-runtime/pkg/client/fake"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/hostagent/driver"
	"github.com/invisible-dots/invisible-dots/hostagent/driver/fake"
	"github.com/invisible-dots/invisible-dots/internal/home"
	"github.com/invisible-dots/invisible-dots/internal/scheme"
)

var testNow = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func testComputer(name string, strategy dotsv1.RunStrategy) *dotsv1.Computer {
	return &dotsv1.Computer{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name), Finalizers: []string{dotsv1.ComputerFinalizer}},
		Spec: dotsv1.ComputerSpec{CPU: 2, Memory: resource.MustParse("512Mi"), Disk: resource.MustParse("2Gi"),
			RunStrategy: strategy, NodeName: testHost},
	}
}

const testHost = "h1"

func newTestReconciler(drv driver.Driver, objs ...client.Object) (*Reconciler, client.Client) {
	c := clientfake.NewClientBuilder().WithScheme(scheme.Scheme).
		WithStatusSubresource(&dotsv1.Computer{}).WithObjects(objs...).Build()
	clk := clocktesting.NewFakePassiveClock(testNow)
	if h, ok := drv.(*fake.Host); ok {
		h.Clock = clk
	}
	return &Reconciler{
		Client: c, APIReader: c, Driver: drv, HostName: testHost,
		Recorder: events.NewFakeRecorder(1000),
		Clock:    clk,
		Jitter:   func() float64 { return 0 },
	}, c
}

// getComputer reads a Computer of namespace default back.
func getComputer(c client.Client, name string) *dotsv1.Computer {
	got := &dotsv1.Computer{}
	_ = c.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: name}, got)
	return got
}

func reconcileOnce(t *testing.T, r *Reconciler, name string) ctrl.Result {
	t.Helper()
	res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Namespace: "default", Name: name}})
	if err != nil {
		t.Fatalf("Reconcile(%s): %v", name, err)
	}
	return res
}

func TestComputerStartPassesTokenFromItsSecret(t *testing.T) {
	var got driver.Spec
	h := fake.NewHost()
	drv := fake.DriverFns{
		ObserveFn: h.Observe,
		StartFn: func(ctx context.Context, s driver.Spec) (driver.Observation, error) {
			got = s
			return h.Start(ctx, s)
		},
		HealthFn: h.Health,
	}
	r, c := newTestReconciler(drv, testComputer("a", dotsv1.RunOnDemand))
	reconcileOnce(t, r, "a")

	sec := &corev1.Secret{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: TokenSecretName("a")}, sec); err != nil {
		t.Fatalf("token secret: %v", err)
	}
	want := driver.Spec{
		ID: home.VMID{Namespace: "default", Name: "a"}, UID: "uid-a", CPUs: 2, MemoryMiB: 512, DiskBytes: 2 << 30,
		Token: string(sec.Data[TokenSecretKey]),
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Start spec: -want +got:\n%s", diff)
	}
	if len(got.Token) != 64 {
		t.Errorf("token is %d characters; want 64 (32 random bytes, hex)", len(got.Token))
	}

	comp := &dotsv1.Computer{}
	_ = c.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: "a"}, comp)
	if comp.Status.State != dotsv1.ComputerRunning || !meta.IsStatusConditionTrue(comp.Status.Conditions, dotsv1.ReadyCondition) {
		t.Errorf("after one reconcile: state %s, conditions %+v; want RUNNING and Ready", comp.Status.State, comp.Status.Conditions)
	}
	for _, cond := range comp.Status.Conditions {
		if strings.Contains(cond.Message, got.Token) {
			t.Errorf("condition %s carries the token", cond.Type)
		}
	}
}

func TestComputerDeletionBlockedByVMError(t *testing.T) {
	destroyed := false
	drv := fake.DriverFns{
		DestroyFn: func(ctx context.Context, id home.VMID) error {
			if destroyed {
				return nil
			}
			return fmt.Errorf("destroy %s: %w: pid 4242 does not listen on its guest port", id, driver.ErrVMError)
		},
	}
	comp := testComputer("b", dotsv1.RunAlways)
	r, c := newTestReconciler(drv, comp)
	if err := c.Delete(context.Background(), comp); err != nil {
		t.Fatal(err)
	}
	res := reconcileOnce(t, r, "b")
	if res.RequeueAfter == 0 {
		t.Errorf("blocked deletion: no requeue; want a poll")
	}
	got := &dotsv1.Computer{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(comp), got); err != nil {
		t.Fatalf("the Computer went although its VM is in ERROR: %v", err)
	}
	ready := meta.FindStatusCondition(got.Status.Conditions, dotsv1.ReadyCondition)
	if got.Status.State != dotsv1.ComputerDeleting || ready == nil || !strings.Contains(ready.Message, "pid 4242") {
		t.Errorf("state %s, Ready %+v; want DELETING and a message naming the problem", got.Status.State, ready)
	}

	destroyed = true
	reconcileOnce(t, r, "b")
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(comp), got); err == nil {
		t.Errorf("after a successful destroy the Computer is still there with finalizers %v", got.Finalizers)
	}
}

func TestComputerCrashLoopBackoff(t *testing.T) {
	h := fake.NewHost()
	id := home.VMID{Namespace: "default", Name: "c"}
	h.FailStart[id] = fmt.Errorf("qemu exited at once: no such file")
	r, c := newTestReconciler(h, testComputer("c", dotsv1.RunAlways))
	clk := r.Clock.(*clocktesting.FakePassiveClock)

	res := reconcileOnce(t, r, "c")
	got := &dotsv1.Computer{}
	_ = c.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: "c"}, got)
	wantRetry := metav1.NewTime(testNow.Add(2 * time.Second))
	if f := got.Status.StartFailure; f == nil || f.ConsecutiveFailCount != 1 || !f.RetryAfter.Equal(&wantRetry) {
		t.Fatalf("after one failed start: startFailure %+v; want count 1, retry at %v", f, wantRetry)
	}
	if res.RequeueAfter != 2*time.Second {
		t.Errorf("RequeueAfter = %v; want the 2s backoff", res.RequeueAfter)
	}

	// Within the backoff nothing is started.
	starts := h.Calls("Start")
	clk.SetTime(testNow.Add(time.Second))
	res = reconcileOnce(t, r, "c")
	if h.Calls("Start") != starts || res.RequeueAfter != time.Second {
		t.Errorf("inside the backoff: %d starts, RequeueAfter %v; want none and 1s", h.Calls("Start")-starts, res.RequeueAfter)
	}

	// After it, a second failure waits 2²×2 s.
	clk.SetTime(testNow.Add(2 * time.Second))
	reconcileOnce(t, r, "c")
	_ = c.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: "c"}, got)
	wantRetry = metav1.NewTime(testNow.Add(10 * time.Second))
	if f := got.Status.StartFailure; f == nil || f.ConsecutiveFailCount != 2 || !f.RetryAfter.Equal(&wantRetry) {
		t.Fatalf("after two failed starts: startFailure %+v; want count 2, retry at %v", f, wantRetry)
	}

	// Cleared once RUNNING and Ready.
	delete(h.FailStart, id)
	clk.SetTime(testNow.Add(10 * time.Second))
	reconcileOnce(t, r, "c")
	_ = c.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: "c"}, got)
	if got.Status.State != dotsv1.ComputerRunning || got.Status.StartFailure != nil {
		t.Errorf("after a good start: state %s, startFailure %+v; want RUNNING and none", got.Status.State, got.Status.StartFailure)
	}
}

// BenchmarkReconcile100Computers measures one reconcile of each of 100
// running Computers (observe, health, status patch) against the in-memory
// fake host, reading as from the manager's cache (fakeCachedClient) and
// writing to controller-runtime's fake client: the reconciler's own cost,
// without the API server's round trips (test/integration has those).
func BenchmarkReconcile100Computers(b *testing.B) {
	h := fake.NewHost()
	objs := make([]client.Object, 0, 100)
	for i := range 100 {
		objs = append(objs, testComputer(fmt.Sprintf("vm-%03d", i), dotsv1.RunAlways))
	}
	r, c := newTestReconciler(h, objs...)
	r.Client = newFakeCachedClient(c)
	ctx := context.Background()
	reconcileAll := func() {
		for i := range 100 {
			if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Namespace: "default", Name: fmt.Sprintf("vm-%03d", i)}}); err != nil {
				b.Fatal(err)
			}
		}
	}
	reconcileAll() // create the token Secrets, start the VMs
	if n := len(h.Running()); n != 100 {
		b.Fatalf("%d VMs running after the first pass; want 100", n)
	}
	r.Recorder = &events.FakeRecorder{} // drops Events (none expected in steady state)
	b.ResetTimer()
	for b.Loop() {
		reconcileAll()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/100, "ns/computer")
}

func TestComputerGuestStuckAtStart(t *testing.T) {
	started := testNow.Add(-6 * time.Minute)
	answering := false
	reboots := 0
	drv := fake.DriverFns{
		ObserveFn: func(context.Context, home.VMID) (driver.Observation, error) {
			return driver.Observation{Provisioned: true, State: driver.Running, PID: 7, GuestPort: 7000, StartedAt: started}, nil
		},
		// A reboot begins with a poweroff.
		PoweroffFn: func(context.Context, home.VMID, string) error {
			reboots++
			return nil
		},
		HealthFn: func(context.Context, home.VMID, string) (protocol.HealthResponse, error) {
			if answering {
				return protocol.HealthResponse{Agentd: protocol.AgentdOK}, nil
			}
			return protocol.HealthResponse{}, errors.New("guest not answering")
		},
	}
	comp := testComputer("d", dotsv1.RunAlways)
	comp.Status.State = dotsv1.ComputerStarting
	r, c := newTestReconciler(drv, comp)
	clk := r.Clock.(*clocktesting.FakePassiveClock)
	get := func() *dotsv1.Computer { return getComputer(c, "d") }

	res := reconcileOnce(t, r, "d")
	got := get()
	if f := got.Status.StartFailure; f == nil || f.ConsecutiveFailCount != 1 || !strings.Contains(f.Message, "did not answer") {
		t.Fatalf("a guest silent 6 minutes after its start: startFailure %+v; want one failure saying so", f)
	}
	if res.RequeueAfter != 2*time.Second || reboots != 0 {
		t.Errorf("RequeueAfter %v, %d reboots; want the 2s backoff first, no reboot yet", res.RequeueAfter, reboots)
	}
	if r := meta.FindStatusCondition(got.Status.Conditions, dotsv1.ReadyCondition); r == nil || r.Reason != dotsv1.StartFailedReason {
		t.Errorf("Ready %+v; want reason %s", r, dotsv1.StartFailedReason)
	}

	// Counted once: another look inside the backoff counts nothing more.
	clk.SetTime(testNow.Add(time.Second))
	reconcileOnce(t, r, "d")
	if n := get().Status.StartFailure.ConsecutiveFailCount; n != 1 || reboots != 0 {
		t.Errorf("inside the backoff: count %d, %d reboots; want 1 and none", n, reboots)
	}

	clk.SetTime(testNow.Add(2 * time.Second))
	answering = true // the guest comes up late, before the reboot
	reconcileOnce(t, r, "d")
	got = get()
	// The guest answered the pre-check, so it is not rebooted: a guest
	// that came up late is kept.
	if reboots != 0 || got.Status.State != dotsv1.ComputerRunning || got.Status.StartFailure != nil {
		t.Errorf("a late guest that answers: %d reboots, state %s, startFailure %+v; want kept, RUNNING, cleared", reboots, got.Status.State, got.Status.StartFailure)
	}
}

func TestComputerGuestStuckIsRebooted(t *testing.T) {
	h := fake.NewHost()
	id := home.VMID{Namespace: "default", Name: "e"}
	h.Unhealthy[id] = errors.New("guest not answering")
	h.PoweroffTakes = time.Second
	r, c := newTestReconciler(h, testComputer("e", dotsv1.RunAlways))
	clk := r.Clock.(*clocktesting.FakePassiveClock)
	get := func() *dotsv1.Computer { return getComputer(c, "e") }
	reconcileOnce(t, r, "e") // started; the guest never answers
	firstPID := get().Status.PID
	clk.SetTime(testNow.Add(6 * time.Minute))
	reconcileOnce(t, r, "e") // counted: a start whose guest did not answer
	if f := get().Status.StartFailure; f == nil || f.ConsecutiveFailCount != 1 {
		t.Fatalf("startFailure %+v; want one failure", f)
	}
	clk.SetTime(testNow.Add(6*time.Minute + 2*time.Second))
	reconcileOnce(t, r, "e") // after the backoff: asked to power off (a reboot's first half)
	if got := get(); got.Status.State != dotsv1.ComputerStopping || h.Calls("Poweroff") != 1 {
		t.Fatalf("after the backoff: state %s, %d poweroffs; want STOPPING and one", got.Status.State, h.Calls("Poweroff"))
	}
	clk.SetTime(testNow.Add(6*time.Minute + 3*time.Second))
	reconcileOnce(t, r, "e") // QEMU gone: started again
	got := get()
	if got.Status.State != dotsv1.ComputerStarting || got.Status.PID == firstPID || got.Status.PID == 0 {
		t.Errorf("after the stop: state %s, pid %d (was %d); want STARTING with a new QEMU", got.Status.State, got.Status.PID, firstPID)
	}
	if f := got.Status.StartFailure; f == nil || f.ConsecutiveFailCount != 1 {
		t.Errorf("startFailure %+v; want the one failure kept until a start answers", f)
	}
}

// TestComputerStopDeadline: a stop asks the guest and returns; the VM is
// STOPPING until QEMU exits, and is killed once the deadline passes.
func TestComputerStopDeadline(t *testing.T) {
	tests := map[string]struct {
		reason     string
		refuse     bool
		advance    time.Duration
		wantState  dotsv1.ComputerState
		wantKilled bool
	}{
		"before the deadline": {
			reason:  "a guest powering off has its 60 s: nothing is killed at 59 s",
			advance: 59 * time.Second, wantState: dotsv1.ComputerStopping,
		},
		"at the deadline": {
			reason:  "a guest still running at 60 s is killed",
			advance: 60 * time.Second, wantState: dotsv1.ComputerStopped, wantKilled: true,
		},
		"guest refuses": {
			reason: "a guest that does not accept the poweroff is killed at once",
			refuse: true, wantState: dotsv1.ComputerStopped, wantKilled: true,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			h := fake.NewHost()
			h.PoweroffTakes = time.Hour // the guest never finishes on its own
			id := home.VMID{Namespace: "default", Name: "s"}
			r, c := newTestReconciler(h, testComputer("s", dotsv1.RunAlways))
			clk := r.Clock.(*clocktesting.FakePassiveClock)
			get := func() *dotsv1.Computer { return getComputer(c, "s") }
			reconcileOnce(t, r, "s")
			if get().Status.State != dotsv1.ComputerRunning {
				t.Fatalf("not running after the start: %s", get().Status.State)
			}
			if tc.refuse {
				h.RefusePoweroff[id] = errors.New("guest: 401")
			}
			halt := get()
			halt.Spec.RunStrategy = dotsv1.RunHalted
			if err := c.Update(context.Background(), halt); err != nil {
				t.Fatal(err)
			}
			res := reconcileOnce(t, r, "s")
			got := get()
			if !tc.refuse {
				want := metav1.NewTime(testNow.Add(defaultStopGrace))
				if got.Status.State != dotsv1.ComputerStopping || got.Status.StopDeadline == nil || !got.Status.StopDeadline.Equal(&want) || res.RequeueAfter != time.Second {
					t.Fatalf("%s\nafter the stop: state %s, deadline %v, requeue %v; want STOPPING until %v, polled every second", tc.reason, got.Status.State, got.Status.StopDeadline, res.RequeueAfter, want)
				}
				clk.SetTime(testNow.Add(tc.advance))
				reconcileOnce(t, r, "s")
				reconcileOnce(t, r, "s") // a killed QEMU is seen gone on the next look
				got = get()
			}
			if got.Status.State != tc.wantState || (h.Calls("Kill") > 0) != tc.wantKilled {
				t.Errorf("%s\nstate %s, kills %d; want %s, killed %v", tc.reason, got.Status.State, h.Calls("Kill"), tc.wantState, tc.wantKilled)
			}
			if tc.wantState == dotsv1.ComputerStopped && (got.Status.StopReason != dotsv1.StopUser || got.Status.StopDeadline != nil) {
				t.Errorf("%s\nstopReason %q, deadline %v; want user and none", tc.reason, got.Status.StopReason, got.Status.StopDeadline)
			}
		})
	}
}
