// Package computer is the host agent's Computer reconciler: it drives the
// VMs of the Computers placed on its host (spec.nodeName) to their run
// strategies through a driver.Driver, and owns their status, their
// finalizer and their guest-token Secrets. No call it makes waits for a
// guest: a start returns once QEMU is spawned, a stop once the guest was
// asked to power off, and later reconciles poll (STARTING, STOPPING). The
// guests' health is probed off the reconcile (package prober), which reads
// the latest result and is woken when one changes.
package computer

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
	"sigs.k8s.io/controller-runtime/pkg/source"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/hostagent/driver"
	"github.com/invisible-dots/invisible-dots/hostagent/guests"
	"github.com/invisible-dots/invisible-dots/hostagent/prober"
	"github.com/invisible-dots/invisible-dots/internal/home"
	"github.com/invisible-dots/invisible-dots/internal/patch"
)

// ControllerName names the Computer reconciler in logs and Events.
const ControllerName = "computer-controller"

// TokenSecretKey is the key of the guest token in the Computer's Secret.
const TokenSecretKey = guests.TokenKey

// TokenSecretName is the name of a Computer's guest-token Secret.
func TokenSecretName(computer string) string { return dotsv1.GuestTokenSecretName(computer) }

// writer owns what the host says of a Computer; the host lifecycle
// controller stands in for Ready while the host is out of reach.
var writer = patch.Writer{Name: ControllerName, Conditions: []string{dotsv1.ReadyCondition, dotsv1.ProvisionedCondition, dotsv1.RuntimeCurrentCondition}}

// How often a Computer is looked at again without a watch event. QEMU's
// death is noticed by this poll (the driver reads qemu.json and /proc; there
// is no channel from the process), so an unasked exit is seen within
// runningPoll. A starting or stopping VM is looked at every second.
const (
	runningPoll    = 10 * time.Second
	transitionPoll = time.Second
	// startingPoll: a starting guest's health is looked at twice a
	// second, so Ready follows its boot closely.
	startingPoll = 500 * time.Millisecond
	stoppedPoll  = 30 * time.Second
	errorPoll    = 30 * time.Second
	// healthCall bounds a health call asked on the reconcile (without a
	// prober, whose bounds are its own).
	healthCall = 5 * time.Second
	// startingHealthCall bounds a health call while the guest boots: QEMU's
	// user network holds a connection open until the guest listens, and a
	// new connection half a second later is answered sooner than a held
	// one.
	startingHealthCall = time.Second
	// poweroffCall bounds the poweroff request: the guest accepts it at
	// once or not at all.
	poweroffCall = 2 * time.Second
	// prepareSleepCall bounds the engine's preparation for a sleep: ref
	// 5.3's 60 s, which holds a tool's 20 s grace to record its result and
	// the close of the Dot's browsers (ref 8.7).
	prepareSleepCall = 60 * time.Second
	// defaultListenTimeout is how long a started QEMU has to listen on its
	// guest port before it is killed with its log (ref 3.4: 30 s). QEMU
	// listens once it parsed its argv and set up its network, well before
	// the guest boots (measured: about 0.2 s under KVM, a second or two
	// under TCG on a loaded host).
	defaultListenTimeout = 30 * time.Second
	// killWait is how long a QEMU killed at its stop's deadline may take
	// to go before the Computer is ERROR (ref 3.4: 10 s).
	killWait = 10 * time.Second
	// defaultStopGrace is how long a guest asked to power off has before it
	// is killed (ref 3.4).
	defaultStopGrace = 60 * time.Second
)

// Reconciler drives its host's VMs to their Computers' run strategies (one
// concern: the VM).
type Reconciler struct {
	Client client.Client
	// APIReader reads the token Secrets: a host agent is given Secrets
	// namespace by namespace, so it neither lists nor watches them.
	APIReader client.Reader
	// Driver runs the host's VMs; nil when the host cannot run them, and
	// DriverProblem says why on each Computer.
	Driver        driver.Driver
	DriverProblem error
	// HostName is the Host this agent runs; it reconciles only the
	// Computers whose spec.nodeName names it.
	HostName string
	Recorder recorder.EventRecorder
	Clock    clock.PassiveClock
	// Jitter returns a number in [0,1) for the backoff; math/rand by
	// default. A test seam.
	Jitter func() float64
	// StartTimeout is how long a started guest has to answer GET
	// /v1/health before the start counts as failed (and is retried with a
	// reboot after the backoff); 5 minutes when zero.
	StartTimeout time.Duration
	// StopGrace is how long a guest asked to power off has before it is
	// killed; 60 s when zero.
	StopGrace time.Duration
	// ListenTimeout is how long a started QEMU has to listen on its guest
	// port; 30 s when zero.
	ListenTimeout time.Duration
	// MaxConcurrentReconciles bounds parallel reconciles; 4 when zero.
	MaxConcurrentReconciles int
	// Prober probes the running guests' health off the reconcile and
	// enqueues a Computer when its guest's result changes; the reconciler
	// reads its cached results. Nil asks each guest on the reconcile.
	Prober *prober.Manager
	// Guests is the host's registry of its guests, where the tokens this
	// reconciler makes are kept for the guest link; a registry of its own
	// when nil.
	Guests *guests.Registry

	// prepares holds the prepare-sleep calls in flight, by Computer UID.
	prepares sync.Map
	// answers enqueues a Computer whose guest answered an ask made in the
	// background (a prepare-sleep); nil outside a manager.
	answers    chan event.GenericEvent
	guestsOnce sync.Once
}

// +kubebuilder:rbac:groups=dots.invisible.dev,resources=computers,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=dots.invisible.dev,resources=dots,verbs=get;list;watch
// +kubebuilder:rbac:groups=dots.invisible.dev,resources=computers/status;computers/finalizers,verbs=get;update;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// SetupWithManager registers the reconciler. At the manager's start every
// Computer of the host is listed and reconciled, which is how a restarted
// agent adopts its running VMs.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.Jitter == nil {
		r.Jitter = mrand.Float64
	}
	if r.HostName == "" {
		return errors.New("computer reconciler: no host name")
	}
	b := ctrl.NewControllerManagedBy(mgr).
		For(&dotsv1.Computer{}).
		Named(ControllerName).
		WithOptions(controller.Options{MaxConcurrentReconciles: cmp.Or(r.MaxConcurrentReconciles, 4)})
	r.answers = make(chan event.GenericEvent, 1024)
	b = b.WatchesRawSource(source.Channel(r.answers, &handler.EnqueueRequestForObject{}))
	if r.Prober != nil {
		// A guest that came up or went silent is looked at at once.
		b = b.WatchesRawSource(source.Channel(r.Prober.Updates(), &handler.EnqueueRequestForObject{}))
	}
	return b.Complete(r)
}

// guests is the registry of the host's guests.
func (r *Reconciler) guests() *guests.Registry {
	r.guestsOnce.Do(func() {
		if r.Guests == nil {
			r.Guests = &guests.Registry{}
		}
	})
	return r.Guests
}

// scope carries what the phases found to updateStatus.
type scope struct {
	computer *dotsv1.Computer
	// prev is the status before this reconcile.
	prev dotsv1.ComputerStatus
	// obs is the latest observation (after an action, the action's); seen
	// is the first, before any action.
	obs      driver.Observation
	seen     driver.Observation
	observed bool
	// decision is what decideRun said.
	decision runDecision
	// acted and actErr are the action taken and how it ended.
	acted  vmAction
	actErr error
	// poweroffErr: the guest did not accept the poweroff (it was killed).
	poweroffErr error
	// prepareErr: the engine did not prepare for a sleep (it was powered
	// off all the same); preparing: it is preparing still.
	prepareErr error
	preparing  bool
	// deadline is when a guest asked to power off by this reconcile is
	// killed.
	deadline time.Time
	kill     driver.KillResult
	// health is the guest's answer when asked; healthErr why it did not.
	healthAsked bool
	health      protocol.HealthResponse
	healthErr   error
	// newestRuntime is the newest runtime ISO registered on the host, read
	// while the VM runs (RuntimeCurrent); empty when it could not be read.
	newestRuntime string
	// stuck: this reconcile counted a start whose guest never answered.
	stuck bool
	// deleting: the VM is being destroyed; deleteErr why it is not yet.
	deleteErr error
	// observeErr: the host could not be read.
	observeErr error
}

// Reconcile: get, ensure the finalizer, then the delete or the normal phase,
// and one status write at the end from what they found.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, reterr error) {
	c := &dotsv1.Computer{}
	if err := r.Client.Get(ctx, req.NamespacedName, c); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if c.Spec.NodeName != r.HostName {
		return ctrl.Result{}, nil // another host's (the cache holds only ours)
	}
	if added, err := patch.EnsureFinalizer(ctx, r.Client, c, dotsv1.ComputerFinalizer); added || err != nil {
		return ctrl.Result{}, err
	}

	helper := patch.NewHelper(r.Client, writer, c)
	s := &scope{computer: c, prev: *c.Status.DeepCopy()}
	defer func() {
		if !c.DeletionTimestamp.IsZero() && !controllerutil.ContainsFinalizer(c, dotsv1.ComputerFinalizer) {
			return // gone with the finalizer's removal
		}
		r.updateStatus(s, reterr == nil)
		r.recordAction(s)
		// The status is read back as the last reconcile's memory (the
		// previous state tells an unasked exit from our stop), so it is
		// written only over the version it was computed from.
		written, err := helper.Patch(ctx, c)
		switch {
		case written:
			r.recordTransition(s)
		case apierrors.IsConflict(err):
			res, reterr = ctrl.Result{RequeueAfter: patch.ConflictRetry}, nil
		case err != nil && !apierrors.IsNotFound(err):
			reterr = kerrors.NewAggregate([]error{reterr, err})
		}
	}()

	if !c.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, s)
	}
	return r.reconcileNormal(ctx, s)
}

// VMID is the VM of a Computer on its host, keyed by namespace and name
// together (DESIGN 5): the driver's and the guest link's one name for it.
func VMID(c *dotsv1.Computer) home.VMID {
	return home.VMID{Namespace: c.Namespace, Name: c.Name}
}

// reconcileNormal: token, observe, decide, act, ask for health.
func (r *Reconciler) reconcileNormal(ctx context.Context, s *scope) (ctrl.Result, error) {
	c := s.computer
	if r.Driver == nil {
		s.observeErr = fmt.Errorf("host %s cannot run VMs: %w", r.HostName, r.DriverProblem)
		return ctrl.Result{}, nil // nothing changes until the agent restarts
	}
	token, err := r.ensureToken(ctx, c)
	if err != nil {
		return ctrl.Result{}, err
	}
	obs, err := r.Driver.Observe(ctx, VMID(c))
	if err != nil {
		s.observeErr = err
		return ctrl.Result{}, fmt.Errorf("observe the vm: %w", err)
	}
	s.obs, s.seen, s.observed = obs, obs, true

	// A guest that never answered after its start was counted as failed;
	// asked again now, it is rebooted if it still does not answer.
	stuck := false
	if obs.State == driver.Running && c.Status.State == dotsv1.ComputerStarting && startCounted(c, obs) {
		if _, err := r.health(ctx, c, obs, token); err != nil && !errors.Is(err, prober.ErrNotProbed) {
			stuck = true
		}
	}
	now := r.Clock.Now()
	in := runInput{
		Strategy:        c.Spec.RunStrategy,
		Gated:           len(c.Spec.StartGates) > 0,
		PrevState:       c.Status.State,
		PrevStopReason:  c.Status.StopReason,
		Observed:        obs.State,
		Exited:          obs.Exited,
		StaleBoot:       obs.StaleBoot,
		PortTaken:       obs.PortTaken,
		StartRequested:  c.RequestPending(dotsv1.StartRequestedAnnotation, c.Status.HandledStartRequest),
		RebootRequested: c.RequestPending(dotsv1.RebootRequestedAnnotation, c.Status.HandledRebootRequest),
		SleepRequested:  c.RequestPending(dotsv1.SleepRequestedAnnotation, c.Status.HandledSleepRequest),
		BackoffLeft:     r.backoffLeft(c),
		GuestStuck:      stuck,
		DeadlinePassed:  c.Status.StopDeadline != nil && !now.Before(c.Status.StopDeadline.Time),
		PoweroffSent:    c.Status.PoweroffTime != nil,
	}
	if obs.State == driver.Running {
		// Every stop waits for its Dot to leave READY (ref 9.3).
		in.DotLeftReady = r.dotLeftReady(ctx, c)
		in.NeverListened = obs.NotListening && !obs.StartedAt.IsZero() && r.Clock.Since(obs.StartedAt) >= cmp.Or(r.ListenTimeout, defaultListenTimeout)
		in.KillOverdue = c.Status.PoweroffTime != nil && c.Status.StopDeadline != nil && !now.Before(c.Status.StopDeadline.Add(killWait))
	}
	d := decideRun(in)
	if d.CountFailure {
		// A start that never reached RUNNING ended: count it before the
		// decision whether to start again, so the backoff holds that start.
		msg := "QEMU exited before its guest answered"
		if obs.ExitStatus != "" {
			msg += " (" + obs.ExitStatus + ")"
		}
		if obs.Fix != "" {
			msg += "; " + obs.Fix
		}
		r.recordStartFailure(c, msg+logSuffix(obs.LogTail))
		in.BackoffLeft = r.backoffLeft(c)
		d = decideRun(in)
	}
	s.decision = d

	if d.NeverListened {
		r.recordStartFailure(c, fmt.Sprintf("QEMU pid %d did not listen on its guest port 127.0.0.1:%d within %s of its start, so no guest could come up behind it; it was killed", obs.PID, obs.GuestPort, cmp.Or(r.ListenTimeout, defaultListenTimeout))+logSuffix(obs.LogTail))
	}
	if d.CalledOff {
		// Nothing was said to the guest: it goes back to RUNNING, and the
		// guest link makes its Dot READY again.
		c.Status.StopDeadline, c.Status.PoweroffTime = nil, nil
		r.prepares.Delete(c.UID) // a prepare-sleep of the sleep called off is not this VM's next
	}
	if d.StopDone {
		c.Status.StopDeadline, c.Status.PoweroffTime = nil, nil
		// Our stop ended: clear what QEMU's record left behind.
		if k, err := r.Driver.Kill(ctx, VMID(c)); err == nil {
			s.kill = k
		}
	}
	switch d.Action {
	case actStart:
		s.acted = actStart
		o, err := r.Driver.Start(ctx, r.startSpec(c, token))
		s.actErr = err
		switch {
		case err == nil:
			s.obs = o
		case home.DiskFull(err):
			r.recordDiskFull(c, err)
			r.observeAgain(ctx, s)
		default:
			// Counted now, so the requeue below waits out the backoff.
			r.recordStartFailure(c, "start failed: "+err.Error())
			r.observeAgain(ctx, s)
		}
	case actLeaveReady:
		// STOPPING with no poweroff yet: the guest link sees a Computer
		// that is not Ready and takes the Dot out of READY, which stops the
		// deliverer; the next reconcile goes on (DotLeftReady), or at this
		// deadline whatever the Dot says.
		s.acted = actLeaveReady
		c.Status.StopDeadline = &metav1.Time{Time: now.Add(leaveReadyWait)}
		c.Status.PoweroffTime = nil
	case actStop:
		if d.PrepareSleep {
			// The engine saves what it holds (ref 8.7); a guest that does
			// not answer in prepareSleepCall is powered off all the same.
			done, err := r.prepareSleep(ctx, c, obs, token)
			if !done {
				// STOPPING, no poweroff yet, while the call goes on; the
				// next reconcile looks again.
				s.preparing = true
				if c.Status.StopDeadline == nil {
					c.Status.StopDeadline = &metav1.Time{Time: now.Add(leaveReadyWait)}
				}
				break
			}
			s.prepareErr = err
		}
		s.acted = actStop
		pctx, cancel := context.WithTimeout(ctx, poweroffCall)
		s.poweroffErr = r.Driver.Poweroff(pctx, VMID(c), token)
		cancel()
		grace := r.StopGrace
		if grace == 0 {
			grace = defaultStopGrace
		}
		deadline := now.Add(grace)
		if s.poweroffErr != nil {
			// A guest that does not accept the poweroff cannot power itself
			// off: it is killed at once.
			deadline = now
			s.acted = actKill
			s.kill, s.actErr = r.Driver.Kill(ctx, VMID(c))
		}
		s.deadline = deadline
		c.Status.StopDeadline = &metav1.Time{Time: deadline}
		c.Status.PoweroffTime = &metav1.Time{Time: now}
		r.observeAgain(ctx, s)
	case actKill:
		s.acted = actKill
		s.kill, s.actErr = r.Driver.Kill(ctx, VMID(c))
		r.observeAgain(ctx, s)
	}

	if s.obs.State != driver.Running && r.Prober != nil {
		r.Prober.Forget(client.ObjectKeyFromObject(c))
	}
	if s.obs.State == driver.Running && c.Status.StopDeadline == nil {
		s.healthAsked = true
		s.health, s.healthErr = r.health(ctx, c, s.obs, token)
		s.newestRuntime = r.newestRuntime(ctx)
		timeout := r.StartTimeout
		if timeout == 0 {
			timeout = defaultStartTimeout
		}
		if s.healthErr != nil && !errors.Is(s.healthErr, prober.ErrNotProbed) && s.acted == actNone && c.Status.State == dotsv1.ComputerStarting &&
			!s.obs.StartedAt.IsZero() && r.Clock.Since(s.obs.StartedAt) > timeout && !startCounted(c, s.obs) {
			// KubeVirt counts a VMI that never reached Running; ours is a
			// guest that never answered.
			r.recordStartFailure(c, fmt.Sprintf("the guest did not answer GET /v1/health within %s of QEMU's start: %v", timeout, s.healthErr))
			s.stuck = true
		}
	}
	return r.requeue(s), nil
}

// leaveReadyWait bounds how long a VM going to sleep waits for its Dot to
// leave READY before it powers off all the same (the guest link takes it
// out within a reconcile; this is for a guest link that cannot write).
const leaveReadyWait = 5 * time.Second

// dotLeftReady says whether the Computer's Dot is no longer READY (its
// engine's AgentReady is not true), or is gone or going: nothing more is
// delivered to its guest.
func (r *Reconciler) dotLeftReady(ctx context.Context, c *dotsv1.Computer) bool {
	owner := metav1.GetControllerOf(c)
	if owner == nil {
		return true
	}
	dot := &dotsv1.Dot{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: owner.Name}, dot); err != nil {
		return apierrors.IsNotFound(err)
	}
	// A Dot that is being deleted is pushed and delivered nothing more (the
	// guest link lets its guest go at once).
	return dot.UID != owner.UID || !dot.DeletionTimestamp.IsZero() || !meta.IsStatusConditionTrue(dot.Status.Conditions, dotsv1.AgentReadyCondition)
}

// observeAgain replaces the observation after an action.
func (r *Reconciler) observeAgain(ctx context.Context, s *scope) {
	if o, err := r.Driver.Observe(ctx, VMID(s.computer)); err == nil {
		s.obs = o
	}
}

// defaultStartTimeout: the test image answers in seconds, a desktop golden
// image under KVM in well under a minute.
const defaultStartTimeout = 5 * time.Minute

// health is the guest's answer to GET /v1/health: the prober's latest
// (prober.ErrNotProbed before its first probe of this QEMU ended), which
// is asked to probe this guest from now on. Without a prober the guest is
// asked here, through the proven channel (a test seam: one reconcile sees
// the answer).
func (r *Reconciler) health(ctx context.Context, c *dotsv1.Computer, obs driver.Observation, token string) (protocol.HealthResponse, error) {
	if r.Prober != nil {
		key := client.ObjectKeyFromObject(c)
		r.Prober.Probe(prober.Guest{Key: key, ID: VMID(c), Token: token, PID: obs.PID, Started: obs.StartedAt})
		res := r.Prober.Result(key, obs.PID)
		return res.Health, res.Err
	}
	timeout := healthCall
	if c.Status.State != dotsv1.ComputerRunning {
		timeout = startingHealthCall
	}
	hctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	h, err := r.Driver.Health(hctx, VMID(c), token)
	if err == nil && h.Agentd != protocol.AgentdOK {
		err = fmt.Errorf("dot-agentd answered health with agentd %q, not %q", h.Agentd, protocol.AgentdOK)
	}
	return h, err
}

// newestRuntime is the newest runtime ISO registered on this host (image
// versions begin with their build time), or empty when the host's images
// cannot be listed (or its driver lists none): RuntimeCurrent is then left
// as it was.
func (r *Reconciler) newestRuntime(ctx context.Context) string {
	l, ok := r.Driver.(driver.ImageLister)
	if !ok {
		return ""
	}
	imgs, err := l.Images(ctx)
	if err != nil {
		return ""
	}
	return driver.Newest(imgs, home.Runtime)
}

// startCounted: the running QEMU's start is already counted in
// startFailure (a failure recorded after that QEMU started sets a retry
// time after its start; starts wait for the retry time, so an earlier
// failure's retry time is before it).
func startCounted(c *dotsv1.Computer, obs driver.Observation) bool {
	f := c.Status.StartFailure
	return f != nil && f.RetryAfter != nil && !obs.StartedAt.IsZero() && f.RetryAfter.Time.After(obs.StartedAt)
}

// requeue is when to look again: the backoff's end, a starting guest soon,
// a running VM's QEMU on the poll that notices an exit.
func (r *Reconciler) requeue(s *scope) ctrl.Result {
	if s.decision.Wait > 0 {
		return ctrl.Result{RequeueAfter: s.decision.Wait}
	}
	if s.actErr != nil || s.stuck {
		if w := r.backoffLeft(s.computer); w > 0 {
			return ctrl.Result{RequeueAfter: w}
		}
		return ctrl.Result{RequeueAfter: transitionPoll}
	}
	switch {
	case s.obs.State == driver.Error:
		return ctrl.Result{RequeueAfter: errorPoll}
	case s.obs.State == driver.Running && s.computer.Status.StopDeadline != nil:
		// STOPPING: watch for QEMU's exit, and kill at the deadline.
		return ctrl.Result{RequeueAfter: transitionPoll}
	case s.obs.State == driver.Running && s.healthErr != nil && s.prev.State != dotsv1.ComputerRunning:
		return ctrl.Result{RequeueAfter: startingPoll}
	case s.obs.State == driver.Running && s.healthErr != nil:
		return ctrl.Result{RequeueAfter: transitionPoll}
	case s.obs.State == driver.Running:
		return ctrl.Result{RequeueAfter: runningPoll}
	default:
		return ctrl.Result{RequeueAfter: stoppedPoll}
	}
}

// reconcileDelete destroys the VM and its files, then lets the Computer go.
// A VM in ERROR holds it: nothing is killed that cannot be proven ours.
func (r *Reconciler) reconcileDelete(ctx context.Context, s *scope) (ctrl.Result, error) {
	c := s.computer
	if !controllerutil.ContainsFinalizer(c, dotsv1.ComputerFinalizer) {
		return ctrl.Result{}, nil
	}
	if r.Driver == nil {
		s.deleteErr = fmt.Errorf("host %s cannot run VMs (%w), so its agent cannot destroy this one; fix the host and restart its agent, or delete the Host if the machine is gone", r.HostName, r.DriverProblem)
		return ctrl.Result{}, nil
	}
	// A delete, like every stop, takes the Dot out of READY before anything
	// else (ref 9.3): the Computer is not Ready from here (DELETING), the
	// guest link takes its Dot out, and only then is QEMU killed, so a
	// delivery that found the Dot READY cannot meet a VM half destroyed.
	// A Dot that does not leave READY in leaveReadyWait holds nothing up.
	if obs, err := r.Driver.Observe(ctx, VMID(c)); err == nil && obs.State == driver.Running &&
		!r.dotLeftReady(ctx, c) && r.Clock.Now().Before(c.DeletionTimestamp.Add(leaveReadyWait)) {
		s.deleteErr = errWaitingForDotToLeaveReady
		return ctrl.Result{RequeueAfter: transitionPoll}, nil
	}
	if err := r.Driver.Destroy(ctx, VMID(c)); err != nil {
		s.deleteErr = err
		switch {
		case errors.Is(err, driver.ErrVMError):
			return ctrl.Result{RequeueAfter: errorPoll}, nil
		case errors.Is(err, driver.ErrStillRunning):
			return ctrl.Result{RequeueAfter: transitionPoll}, nil
		}
		return ctrl.Result{}, fmt.Errorf("destroy the vm: %w", err)
	}
	r.guests().ForgetToken(c.UID)
	if r.Prober != nil {
		r.Prober.Forget(client.ObjectKeyFromObject(c))
	}
	r.Recorder.Eventf(c, nil, corev1.EventTypeNormal, "Destroyed", "Destroy", "VM %s and its files removed from host %s", VMID(c), r.HostName)
	return ctrl.Result{}, patch.RemoveFinalizer(ctx, r.Client, c, dotsv1.ComputerFinalizer)
}

// errWaitingForDotToLeaveReady: a delete waits for its Dot to leave READY.
var errWaitingForDotToLeaveReady = errors.New("waiting for the Dot to leave READY before its VM is destroyed")

// backoffLeft is how long the crash-loop backoff still holds a start.
func (r *Reconciler) backoffLeft(c *dotsv1.Computer) time.Duration {
	f := c.Status.StartFailure
	if f == nil || f.RetryAfter == nil {
		return 0
	}
	left := f.RetryAfter.Sub(r.Clock.Now())
	if left < 0 {
		return 0
	}
	return left
}

// startSpec is the driver's Spec for a Computer: the images the spec names;
// else the golden image in use (a newer registration does not change a
// Computer's disk under it) and the newest runtime ISO, the driver's choice
// (ref 3.3: a new version of our code reaches every Dot at its next start).
func (r *Reconciler) startSpec(c *dotsv1.Computer, token string) driver.Spec {
	cpus, mem := specShape(c)
	return driver.Spec{
		ID:           VMID(c),
		UID:          string(c.UID),
		CPUs:         cpus,
		MemoryMiB:    mem,
		DiskBytes:    c.Spec.Disk.Value(),
		GoldenImage:  cmp.Or(c.Spec.GoldenImage, c.Status.GoldenImage),
		RuntimeImage: c.Spec.RuntimeImage,
		Token:        token,
	}
}

// specShape is the CPUs and MiB of memory a start gives the VM.
func specShape(c *dotsv1.Computer) (int, int64) {
	cpus, mem := c.Shape()
	return int(cpus), mem >> 20
}

// ensureToken returns the Computer's guest token (the registry's), creating
// its Secret (32 random bytes, owned by the Computer) on first use. The
// token is never logged and never put in an error.
func (r *Reconciler) ensureToken(ctx context.Context, c *dotsv1.Computer) (string, error) {
	tok, err := r.guests().Token(ctx, r.APIReader, c)
	if !apierrors.IsNotFound(err) {
		return tok, err
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("make the guest token: %w", err)
	}
	key := guests.TokenSecret(c)
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace, Labels: map[string]string{dotsv1.ComputerLabel: c.Name}},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{TokenSecretKey: []byte(hex.EncodeToString(b[:]))},
	}
	if err := controllerutil.SetControllerReference(c, sec, r.Client.Scheme()); err != nil {
		return "", err
	}
	err = r.Client.Create(ctx, sec)
	if apierrors.IsAlreadyExists(err) {
		// Made by a reconcile that ended before it kept the token.
		err = r.APIReader.Get(ctx, key, sec)
	}
	if err != nil {
		return "", fmt.Errorf("create the guest-token secret %s: %w", key, err)
	}
	return r.guests().Keep(c, sec)
}
