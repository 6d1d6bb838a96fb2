package controllers

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/hostagent/driver"
	"github.com/invisible-dots/invisible-dots/hostagent/images"
	"github.com/invisible-dots/invisible-dots/internal/home"
)

// ComputerControllerName names the Computer reconciler in logs and Events.
const ComputerControllerName = "computer-controller"

// ComputerFinalizer holds a Computer until its VM and its files are
// destroyed on the host.
const ComputerFinalizer = "dots.invisible.dev/vm"

// TokenSecretKey is the key of the guest token in the Computer's Secret.
const TokenSecretKey = "token"

// TokenSecretName is the name of a Computer's guest-token Secret.
func TokenSecretName(computer string) string { return computer + "-guest-token" }

// How often a Computer is looked at again without a watch event. QEMU's
// death is noticed by this poll (the driver reads qemu.json and /proc; there
// is no channel from the process), so an unasked exit is seen within
// runningPoll. A starting guest is asked for its health more often.
const (
	runningPoll  = 10 * time.Second
	startingPoll = time.Second
	stoppedPoll  = 30 * time.Second
	errorPoll    = 30 * time.Second
	healthCall   = 5 * time.Second
	// conflictRetry: a status written over a newer version is computed
	// again at once from the newer one.
	conflictRetry = 100 * time.Millisecond
)

// ComputerReconciler drives one host's VMs to their Computers' run
// strategies through a driver.Driver (one concern: the VM). It owns the
// Computer's status and its guest-token Secret.
type ComputerReconciler struct {
	Client client.Client
	// APIReader reads around the cache (the token Secret just created).
	APIReader client.Reader
	Driver    driver.Driver
	Home      home.Layout
	Recorder  recorder.EventRecorder
	Clock     clock.PassiveClock
	// Jitter returns a number in [0,1) for the backoff; math/rand by
	// default. A test seam.
	Jitter func() float64
	// ResolveImages picks the image versions of a start; by default the
	// spec's, else the ones in use, else the newest registered in Home.
	// A test seam (the fake host needs no image files).
	ResolveImages func(c *dotsv1.Computer) (golden, runtime string, err error)
	// StartTimeout is how long a started guest has to answer GET
	// /v1/health before the start counts as failed (and is retried with a
	// reboot after the backoff); 5 minutes when zero.
	StartTimeout time.Duration
	// MaxConcurrentReconciles bounds parallel reconciles (a start blocks
	// its worker until QEMU listens); 4 when zero.
	MaxConcurrentReconciles int
}

// +kubebuilder:rbac:groups=dots.invisible.dev,resources=computers,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=dots.invisible.dev,resources=computers/status;computers/finalizers,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// SetupComputerReconciler registers the Computer reconciler of a manager
// whose host runs VMs through o.Driver.
func SetupComputerReconciler(mgr ctrl.Manager, o Options) error {
	return (&ComputerReconciler{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Driver:    o.Driver,
		Home:      o.Home,
		Recorder:  mgr.GetEventRecorder(ComputerControllerName),
		Clock:     o.Clock,
	}).SetupWithManager(mgr)
}

// SetupWithManager registers the reconciler: it watches Computers and the
// token Secrets they own. At the manager's start every Computer is listed
// and reconciled, which is how a restarted server adopts running VMs.
func (r *ComputerReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.Jitter == nil {
		r.Jitter = mrand.Float64
	}
	if r.ResolveImages == nil {
		r.ResolveImages = r.newestImages
	}
	n := r.MaxConcurrentReconciles
	if n == 0 {
		n = 4
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&dotsv1.Computer{}).
		Owns(&corev1.Secret{}).
		Named(ComputerControllerName).
		WithOptions(controller.Options{MaxConcurrentReconciles: n}).
		Complete(r)
}

// computerScope carries what the phases found to updateStatus.
type computerScope struct {
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
	stop   driver.StopResult
	// health is the guest's answer when asked; healthErr why it did not.
	healthAsked bool
	healthErr   error
	// stuck: this reconcile counted a start whose guest never answered.
	stuck bool
	// deleting: the VM is being destroyed; deleteErr why it is not yet.
	deleteErr error
	// observeErr: the host could not be read.
	observeErr error
	// imageErr: no image could be chosen for a start.
	imageErr error
}

// Reconcile: get, ensure the finalizer, then the delete or the normal phase,
// and one status patch at the end from what they found.
func (r *ComputerReconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, reterr error) {
	c := &dotsv1.Computer{}
	if err := r.Client.Get(ctx, req.NamespacedName, c); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if added, err := ensureFinalizer(ctx, r.Client, c, ComputerFinalizer); added || err != nil {
		return ctrl.Result{}, err
	}

	before := c.DeepCopy()
	s := &computerScope{computer: c, prev: *before.Status.DeepCopy()}
	defer func() {
		if !c.DeletionTimestamp.IsZero() && !controllerutil.ContainsFinalizer(c, ComputerFinalizer) {
			return // gone with the finalizer's removal
		}
		r.updateStatus(s, reterr == nil)
		r.recordAction(s)
		if equality.Semantic.DeepEqual(before.Status, c.Status) {
			return // the steady state writes nothing
		}
		// The status is read back as the last reconcile's memory (the
		// previous state tells an unasked exit from our stop), so it is
		// written only over the version it was computed from: a reconcile
		// that read a stale cache loses and looks again.
		err := r.Client.Status().Patch(ctx, c, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
		switch {
		case err == nil:
			r.recordTransition(s)
		case apierrors.IsConflict(err):
			res, reterr = ctrl.Result{RequeueAfter: conflictRetry}, nil
		case !apierrors.IsNotFound(err):
			reterr = kerrors.NewAggregate([]error{reterr, err})
		}
	}()

	if !c.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, s)
	}
	return r.reconcileNormal(ctx, s)
}

func vmID(c *dotsv1.Computer) home.VMID {
	return home.VMID{Namespace: c.Namespace, Name: c.Name}
}

// reconcileNormal: token, observe, decide, act, ask for health.
func (r *ComputerReconciler) reconcileNormal(ctx context.Context, s *computerScope) (ctrl.Result, error) {
	c := s.computer
	token, err := r.ensureToken(ctx, c)
	if err != nil {
		return ctrl.Result{}, err
	}
	obs, err := r.Driver.Observe(ctx, vmID(c))
	if err != nil {
		s.observeErr = err
		return ctrl.Result{}, fmt.Errorf("observe the vm: %w", err)
	}
	s.obs, s.seen, s.observed = obs, obs, true

	// A guest that never answered after its start was counted as failed;
	// asked again now, it is rebooted if it still does not answer.
	stuck := false
	if obs.State == driver.Running && c.Status.State == dotsv1.ComputerStarting && startCounted(c, obs) {
		if err := r.health(ctx, c, token); err != nil {
			stuck = true
		}
	}
	in := runInput{
		Strategy:        c.Spec.RunStrategy,
		PrevState:       c.Status.State,
		PrevStopReason:  c.Status.StopReason,
		Observed:        obs.State,
		Exited:          obs.Exited,
		StaleBoot:       obs.StaleBoot,
		StartRequested:  pendingRequest(c, dotsv1.StartRequestedAnnotation, c.Status.HandledStartRequest),
		RebootRequested: pendingRequest(c, dotsv1.RebootRequestedAnnotation, c.Status.HandledRebootRequest),
		BackoffLeft:     r.backoffLeft(c),
		GuestStuck:      stuck,
	}
	d := decideRun(in)
	if d.CountFailure {
		// A start that never reached RUNNING ended: count it before the
		// decision whether to start again, so the backoff holds that start.
		msg := "QEMU exited before its guest answered"
		if obs.ExitStatus != "" {
			msg += " (" + obs.ExitStatus + ")"
		}
		r.recordStartFailure(c, msg+logSuffix(obs.LogTail))
		in.BackoffLeft = r.backoffLeft(c)
		d = decideRun(in)
	}
	s.decision = d

	if d.Action == actStart || d.Action == actReboot {
		spec, err := r.startSpec(c, token)
		if err != nil {
			s.imageErr = err
			s.acted, s.actErr = d.Action, err
			r.recordStartFailure(c, "start failed: "+err.Error())
			return r.requeue(s), nil
		}
		s.acted = d.Action
		var o driver.Observation
		if d.Action == actStart {
			o, err = r.Driver.Start(ctx, spec)
		} else {
			o, err = r.Driver.Reboot(ctx, spec)
		}
		s.actErr = err
		if err == nil {
			s.obs = o
		} else {
			// Counted now, so the requeue below waits out the backoff.
			r.recordStartFailure(c, "start failed: "+err.Error())
			if o2, oerr := r.Driver.Observe(ctx, vmID(c)); oerr == nil {
				s.obs = o2
			}
		}
	} else if d.Action == actStop {
		s.acted = actStop
		res, err := r.Driver.Stop(ctx, vmID(c), token)
		s.stop, s.actErr = res, err
		if o2, oerr := r.Driver.Observe(ctx, vmID(c)); oerr == nil {
			s.obs = o2
		}
	}

	if s.obs.State == driver.Running {
		s.healthAsked = true
		s.healthErr = r.health(ctx, c, token)
		timeout := r.StartTimeout
		if timeout == 0 {
			timeout = defaultStartTimeout
		}
		if s.healthErr != nil && s.acted == actNone && c.Status.State == dotsv1.ComputerStarting &&
			!s.obs.StartedAt.IsZero() && r.Clock.Since(s.obs.StartedAt) > timeout && !startCounted(c, s.obs) {
			// KubeVirt counts a VMI that never reached Running; ours is a
			// guest that never answered.
			r.recordStartFailure(c, fmt.Sprintf("the guest did not answer GET /v1/health within %s of QEMU's start: %v", timeout, s.healthErr))
			s.stuck = true
		}
	}
	return r.requeue(s), nil
}

// defaultStartTimeout: the test image answers in seconds, a desktop golden
// image under KVM in well under a minute.
const defaultStartTimeout = 5 * time.Minute

// health asks the guest GET /v1/health through the proven channel.
func (r *ComputerReconciler) health(ctx context.Context, c *dotsv1.Computer, token string) error {
	hctx, cancel := context.WithTimeout(ctx, healthCall)
	defer cancel()
	h, err := r.Driver.Health(hctx, vmID(c), token)
	if err == nil && h.Agentd != protocol.AgentdOK {
		err = fmt.Errorf("dot-agentd answered health with agentd %q, not %q", h.Agentd, protocol.AgentdOK)
	}
	return err
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
func (r *ComputerReconciler) requeue(s *computerScope) ctrl.Result {
	if s.decision.Wait > 0 {
		return ctrl.Result{RequeueAfter: s.decision.Wait}
	}
	if s.actErr != nil || s.stuck {
		if w := r.backoffLeft(s.computer); w > 0 {
			return ctrl.Result{RequeueAfter: w}
		}
		return ctrl.Result{RequeueAfter: startingPoll}
	}
	switch {
	case s.obs.State == driver.Error:
		return ctrl.Result{RequeueAfter: errorPoll}
	case s.obs.State == driver.Running && (s.healthErr != nil):
		return ctrl.Result{RequeueAfter: startingPoll}
	case s.obs.State == driver.Running:
		return ctrl.Result{RequeueAfter: runningPoll}
	default:
		return ctrl.Result{RequeueAfter: stoppedPoll}
	}
}

// reconcileDelete destroys the VM and its files, then lets the Computer go.
// A VM in ERROR holds it: nothing is killed that cannot be proven ours.
func (r *ComputerReconciler) reconcileDelete(ctx context.Context, s *computerScope) (ctrl.Result, error) {
	c := s.computer
	if !controllerutil.ContainsFinalizer(c, ComputerFinalizer) {
		return ctrl.Result{}, nil
	}
	if err := r.Driver.Destroy(ctx, vmID(c)); err != nil {
		s.deleteErr = err
		if errors.Is(err, driver.ErrVMError) {
			return ctrl.Result{RequeueAfter: errorPoll}, nil
		}
		return ctrl.Result{}, fmt.Errorf("destroy the vm: %w", err)
	}
	r.Recorder.Eventf(c, nil, corev1.EventTypeNormal, "Destroyed", "Destroy", "VM %s and its files removed from the host", vmID(c))
	patch := client.MergeFrom(c.DeepCopy())
	controllerutil.RemoveFinalizer(c, ComputerFinalizer)
	if err := r.Client.Patch(ctx, c, patch); err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, nil
}

// pendingRequest: the annotation holds a value the status has not handled.
func pendingRequest(c *dotsv1.Computer, key, handled string) bool {
	v := c.Annotations[key]
	return v != "" && v != handled
}

// backoffLeft is how long the crash-loop backoff still holds a start.
func (r *ComputerReconciler) backoffLeft(c *dotsv1.Computer) time.Duration {
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

// startSpec is the driver's Spec for a Computer.
func (r *ComputerReconciler) startSpec(c *dotsv1.Computer, token string) (driver.Spec, error) {
	golden, runtime, err := r.ResolveImages(c)
	if err != nil {
		return driver.Spec{}, err
	}
	cpus, mem := specShape(c)
	return driver.Spec{
		ID:           vmID(c),
		UID:          string(c.UID),
		CPUs:         cpus,
		MemoryMiB:    mem,
		DiskBytes:    c.Spec.Disk.Value(),
		GoldenImage:  golden,
		RuntimeImage: runtime,
		Token:        token,
	}, nil
}

// specShape is the CPUs and MiB of memory a start gives the VM (the CRD's
// defaults when the spec has none).
func specShape(c *dotsv1.Computer) (int, int64) {
	cpus := int(c.Spec.CPU)
	if cpus == 0 {
		cpus = 2
	}
	mem := c.Spec.Memory.Value() / (1 << 20)
	if mem == 0 {
		mem = 4096
	}
	return cpus, mem
}

// newestImages: the spec's version, else the one in use (so a newer
// registration does not change a Computer's disk under it), else the newest
// registered.
func (r *ComputerReconciler) newestImages(c *dotsv1.Computer) (string, string, error) {
	pick := func(kind home.ImageKind, spec, inUse string) (string, error) {
		if spec != "" {
			// A version named in the spec must be registered: say so here,
			// before the driver is asked.
			if _, err := images.Get(r.Home, kind, spec); err != nil {
				return "", err
			}
			return spec, nil
		}
		if inUse != "" {
			return inUse, nil
		}
		img, err := images.Latest(r.Home, kind)
		if err != nil {
			return "", err
		}
		return img.Version, nil
	}
	golden, err := pick(home.Golden, c.Spec.GoldenImage, c.Status.GoldenImage)
	if err != nil {
		return "", "", err
	}
	runtime, err := pick(home.Runtime, c.Spec.RuntimeImage, c.Status.RuntimeImage)
	if err != nil {
		return "", "", err
	}
	return golden, runtime, nil
}

// ensureToken returns the Computer's guest token, creating its Secret (32
// random bytes, owned by the Computer) on first use. The token is never
// logged and never put in an error.
func (r *ComputerReconciler) ensureToken(ctx context.Context, c *dotsv1.Computer) (string, error) {
	key := client.ObjectKey{Namespace: c.Namespace, Name: TokenSecretName(c.Name)}
	sec := &corev1.Secret{}
	err := r.Client.Get(ctx, key, sec)
	if apierrors.IsNotFound(err) {
		var b [32]byte
		if _, err := rand.Read(b[:]); err != nil {
			return "", fmt.Errorf("make the guest token: %w", err)
		}
		sec = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace, Labels: map[string]string{ComputerLabel: c.Name}},
			Type:       corev1.SecretTypeOpaque,
			Data:       map[string][]byte{TokenSecretKey: []byte(hex.EncodeToString(b[:]))},
		}
		if err := controllerutil.SetControllerReference(c, sec, r.Client.Scheme()); err != nil {
			return "", err
		}
		err = r.Client.Create(ctx, sec)
		if apierrors.IsAlreadyExists(err) {
			// Made by an earlier reconcile the cache has not seen yet.
			err = r.APIReader.Get(ctx, key, sec)
		}
		if err != nil {
			return "", fmt.Errorf("create the guest-token secret %s: %w", key, err)
		}
	} else if err != nil {
		return "", fmt.Errorf("read the guest-token secret %s: %w", key, err)
	}
	if !metav1.IsControlledBy(sec, c) {
		return "", fmt.Errorf("secret %s exists and does not belong to Computer %s: delete or rename it", key, c.Name)
	}
	tok := string(sec.Data[TokenSecretKey])
	if len(tok) < 16 {
		return "", fmt.Errorf("secret %s has no usable %q key (at least 16 characters): delete it and a new token is made", key, TokenSecretKey)
	}
	return tok, nil
}

// ComputerLabel is set on the objects made for a Computer, with its name.
const ComputerLabel = "dots.invisible.dev/computer"
