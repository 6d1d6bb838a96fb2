// Package guestlink is the host agent's guest link: the READY procedure of
// ref 9.3 for the Dots whose Computers run on its host. Once a Computer is
// Ready (dot-agentd answers through the proven channel), it pushes the
// OpenRouter key and the MCP secrets (POST /v1/agent/secrets), then the
// runtime configuration (PUT /v1/agent/config), then requires the engine's
// own health (GET /v1/agent/health). The Dot's conditions KeyPushed,
// ConfigApplied and AgentReady say each step; this reconciler writes those
// three and nothing else of the Dot, and the Dot reconciler makes the phase
// READY only when they hold.
//
// A change of the Dot's generation or of a Secret it uses while a push runs
// is pushed again, until a round completes on an unchanged Dot and Secrets.
// Pushes to one guest run one at a time: a Dot is one key of the workqueue,
// which never hands one key to two workers, and a re-push the event pump
// asks for (RequestPush) goes through the same queue.
//
// Secrets are read with the API reader, not a cluster-wide informer: a host
// agent may read them only in the namespaces where it has Computers, and the
// default key's one Secret in the system namespace. The control plane's
// writes of a Dot's own Secret (its key, its MCP secrets: internal/keystore)
// annotate the Dot (dotsv1.SecretsChangedAnnotation), which this reconciler
// watches, so such a change reaches a running guest as soon as the watch
// tells of it; any other change of a Secret is noticed by the poll of a
// Ready Dot (steadyPoll), a key stored for a Dot that has none by the
// shorter keyPoll.
package guestlink

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
	"sigs.k8s.io/controller-runtime/pkg/source"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/hostagent/computer"
	"github.com/invisible-dots/invisible-dots/hostagent/guestclient"
	"github.com/invisible-dots/invisible-dots/hostagent/guestnotice"
	"github.com/invisible-dots/invisible-dots/hostagent/guests"
	"github.com/invisible-dots/invisible-dots/internal/home"
	"github.com/invisible-dots/invisible-dots/internal/patch"
)

// ControllerName names the guest link in logs and Events.
const ControllerName = "guest-link"

// writer owns the three conditions of the READY procedure, and only them.
var writer = patch.Writer{Name: ControllerName, Conditions: []string{
	dotsv1.KeyPushedCondition, dotsv1.ConfigAppliedCondition, dotsv1.AgentReadyCondition,
}}

// Guest is what the guest link asks of a guest: the engine's routes through
// dot-agentd's reverse proxy (/v1/agent/<sub>), on the proven channel.
// *guestclient.Client is the product's.
type Guest interface {
	Agent(ctx context.Context, t guestclient.Target, method, sub string, in, out any) error
}

// VMs reads the records of this host's VMs (qemu.json, DESIGN 5: the truth
// about a running VM). The driver's guest channel (driver.GuestChannel) is
// the product's.
type VMs interface {
	GuestTarget(ctx context.Context, id home.VMID, token string) (guestclient.Target, error)
}

// How often a Dot is looked at again without a watch event.
const (
	// steadyPoll: a Ready Dot's Secrets are read again (a rotated key or
	// MCP secret is pushed), and the engine's health asked.
	steadyPoll = 30 * time.Second
	// keyPoll: a Dot waits for a key to be stored.
	keyPoll = 3 * time.Second
	// retryPoll: a push the guest did not take is tried again at most this
	// long after; the first tries come sooner (retryWait), since a guest
	// that just booted answers before its engine listens.
	retryPoll = 5 * time.Second
	// firstRetry is the wait after the first failed call.
	firstRetry = 250 * time.Millisecond
	// enginePoll: a guest whose dot-agentd answers and whose engine does
	// not listen yet is asked again this soon, for at most enginePollFor
	// (then as any failure, from firstRetry). An engine starts a few
	// hundred milliseconds after dot-agentd under KVM, a few seconds under
	// TCG; a try costs the guest one refused connect to a Unix socket.
	enginePoll    = 100 * time.Millisecond
	enginePollFor = 30 * time.Second
	// startingPoll: the engine said it is starting.
	startingPoll = time.Second
	// defaultCallTimeout bounds one call to the guest.
	defaultCallTimeout = 10 * time.Second
	// maxRounds bounds the pushes of one reconcile when the Dot or its
	// Secrets keep changing under it; the next reconcile goes on.
	maxRounds = 5
)

// Reconciler runs the READY procedure for the Dots whose Computers run on
// its host.
type Reconciler struct {
	// Client reads Dots and this host's Computers from the manager's cache
	// and writes the Dots' status.
	Client client.Client
	// APIReader reads Secrets (never cached) and the Dot as it is now while
	// a push runs.
	APIReader client.Reader
	Guest     Guest
	// VMs gives each guest's port and its QEMU's identity (pid, start time,
	// boot id) from the VM's record, for the listener rule the guest client
	// checks before every proof. Nil on a host that cannot run VMs: no
	// guest is reached.
	VMs VMs
	// HostName is the Host this agent runs.
	HostName string
	Recorder recorder.EventRecorder
	Clock    clock.PassiveClock
	// CallTimeout bounds one call to a guest; 10 s when zero.
	CallTimeout time.Duration
	// MaxConcurrentReconciles bounds parallel reconciles (of different
	// Dots: one Dot is never reconciled twice at once); 4 when zero.
	MaxConcurrentReconciles int
	// Guests is the host's registry of its guests: the tokens read here
	// and the targets found here are kept there, for the guest endpoint
	// and the Computer reconciler. A registry of its own when nil.
	Guests *guests.Registry
	// Listeners hear of each Dot's guest after every reconcile.
	Listeners []guestnotice.Listener

	mu sync.Mutex
	// pushed is what reached each Dot's guest, in memory: after an agent's
	// restart everything is pushed once again, which the engine takes as a
	// no-op for the same key and configuration.
	pushed map[types.NamespacedName]record
	// stale marks the Dots whose guest asked to be given everything again.
	stale map[types.NamespacedName]bool
	// failures counts each Dot's calls to its guest that failed in a row
	// since it was last ready: the next try waits retryWait(failures).
	failures map[types.NamespacedName]int
	// engineWait is when each Dot's guest first answered that its engine
	// does not listen, since it was last ready (failed).
	engineWait map[types.NamespacedName]time.Time
	requests   chan event.GenericEvent
}

// +kubebuilder:rbac:groups=dots.invisible.dev,resources=dots,verbs=get;list;watch
// +kubebuilder:rbac:groups=dots.invisible.dev,resources=dots/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",namespace=invisible-dots-system,resources=secrets,verbs=get,resourceNames=openrouter
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// SetupWithManager registers the reconciler. It watches Dots (a new
// generation), this host's Computers (one turning Ready, or a new QEMU), and
// the re-push requests of RequestPush.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.HostName == "" {
		return errors.New("guest link: no host name")
	}
	if r.Guest == nil {
		return errors.New("guest link: no guest client")
	}
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	r.init()
	sameName := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: client.ObjectKeyFromObject(o)}}
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&dotsv1.Dot{}, builder.WithPredicates(predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, secretsChanged))).
		Watches(&dotsv1.Computer{}, sameName, builder.WithPredicates(computerChanged)).
		WatchesRawSource(source.Channel(r.requests, &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: cmp.Or(r.MaxConcurrentReconciles, 4)}).
		Complete(r)
}

func (r *Reconciler) init() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pushed == nil {
		r.pushed = map[types.NamespacedName]record{}
		r.stale = map[types.NamespacedName]bool{}
		r.failures = map[types.NamespacedName]int{}
		r.engineWait = map[types.NamespacedName]time.Time{}
	}
	if r.requests == nil {
		r.requests = make(chan event.GenericEvent, 1024)
	}
	if r.Guests == nil {
		r.Guests = &guests.Registry{}
	}
}

// guests is the registry of the host's guests.
func (r *Reconciler) guests() *guests.Registry {
	r.init()
	return r.Guests
}

// RequestPush asks for the Dot's key and configuration to be pushed to its
// guest again, as at a READY transition. It is what the event pump calls on
// the guest's agent.started (ref 4.3: an engine that restarted inside a
// running VM holds no key). It does not wait, and is safe from any
// goroutine; the push runs in the Dot's turn of the queue, so it never
// overlaps another push to the same guest. When the queue of requests is
// full, the next poll of the Dot (steadyPoll) pushes instead.
func (r *Reconciler) RequestPush(key types.NamespacedName) {
	r.init()
	r.mu.Lock()
	r.stale[key] = true
	r.mu.Unlock()
	select {
	case r.requests <- event.GenericEvent{Object: &dotsv1.Dot{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}}:
	default:
	}
}

// scope carries what the procedure found to updateStatus.
type scope struct {
	// dot is the Dot as last read: the status is computed on it and
	// written over its resourceVersion.
	dot *dotsv1.Dot
	// decided is false when this reconcile has nothing to say of the Dot
	// (its Computer is not on this host).
	decided bool
	// key, config and agent are the three steps' conditions.
	key, config, agent cond
}

type cond struct {
	status          metav1.ConditionStatus
	reason, message string
	// generation is the Dot's generation the condition is about, when it
	// is not the one last read (a configuration applied before the Dot
	// changed again); 0 means the Dot's.
	generation int64
}

func (s *scope) set(c *cond, status metav1.ConditionStatus, reason, message string) {
	*c = cond{status: status, reason: reason, message: message}
}

// Reconcile: get the Dot and its Computer, run the procedure, and write the
// three conditions once at the end.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, reterr error) {
	r.init()
	// The conditions are written once the procedure ends (s, once the Dot
	// and its Computer are read), after the listeners heard: a guest that
	// became ready is pumped and sent to without waiting for that write.
	var s *scope
	defer func() {
		if s != nil {
			res, reterr = r.writeStatus(ctx, s, res, reterr)
		}
	}()
	// What the listeners hear once this reconcile ends: no guest, unless
	// the procedure below reaches one.
	notice := guestnotice.Notice{Key: req.NamespacedName}
	defer func() { r.notify(notice) }()
	dot := &dotsv1.Dot{}
	if err := r.Client.Get(ctx, req.NamespacedName, dot); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	c := &dotsv1.Computer{}
	if err := r.Client.Get(ctx, req.NamespacedName, c); err != nil {
		// Not on this host (the cache holds only this host's Computers),
		// or not made yet: another agent's, or nobody's yet.
		r.forget(req.NamespacedName)
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if c.Spec.NodeName != r.HostName || !metav1.IsControlledBy(c, dot) || !dot.DeletionTimestamp.IsZero() {
		// A Computer the Dot does not own is the Dot reconciler's to
		// report; a Dot that goes is not pushed to.
		r.forget(req.NamespacedName)
		return ctrl.Result{}, nil
	}

	s = &scope{dot: dot, decided: true}
	if why := computerNotReady(c); why != "" {
		r.forget(req.NamespacedName)
		msg := fmt.Sprintf("Computer %s is not Ready (%s): everything is pushed when it is", c.Name, why)
		for _, cd := range []*cond{&s.key, &s.config, &s.agent} {
			s.set(cd, metav1.ConditionFalse, dotsv1.ComputerNotReadyReason, msg)
		}
		return ctrl.Result{}, nil
	}
	token, err := r.guests().Token(ctx, r.APIReader, c)
	if err != nil {
		msg := fmt.Sprintf("the guest token of Computer %s cannot be read: %v", c.Name, err)
		for _, cd := range []*cond{&s.key, &s.config, &s.agent} {
			s.set(cd, metav1.ConditionFalse, dotsv1.ComputerNotReadyReason, msg)
		}
		return ctrl.Result{}, err
	}
	target, err := r.target(ctx, c, token)
	if err != nil {
		// Refused, never proved with less: nothing is pushed, and the
		// listeners hear of no guest (the pump and the deliverer stop).
		r.forget(req.NamespacedName)
		msg := fmt.Sprintf("the guest of Computer %s is not reached: %v", c.Name, err)
		for _, cd := range []*cond{&s.key, &s.config, &s.agent} {
			s.set(cd, metav1.ConditionFalse, dotsv1.ComputerNotReadyReason, msg)
		}
		return ctrl.Result{RequeueAfter: retryPoll}, nil
	}
	res = r.ready(ctx, s, req.NamespacedName, target)
	notice = guestnotice.Notice{Key: req.NamespacedName, DotUID: dot.UID, Target: target, Ready: s.agent.status == metav1.ConditionTrue}
	if !notice.Ready {
		// What the conditions say, as it happens (-v 1): a wake's time to
		// READY is read from these lines.
		ctrl.LoggerFrom(ctx).V(1).Info("the guest is not ready yet", "keyPushed", s.key.reason, "configApplied", s.config.reason,
			"agentReady", s.agent.reason, "why", s.agent.message, "again", res.RequeueAfter)
	}
	return res, nil
}

// notify records the Dot's guest in the registry (its target, or none),
// then tells the listeners.
func (r *Reconciler) notify(n guestnotice.Notice) {
	r.guests().Prove(n.Key, n.Target)
	guestnotice.Bus(r.Listeners).GuestNotice(n)
}

// target is the one place a Computer becomes a guest target (the READY
// pushes here; the registry keeps it for the guest endpoint, and the pump
// and the deliverer take it from the notice): the port and the QEMU's pid,
// start time and boot id from the VM's own record, which must name the QEMU the Computer's status
// reports. A status that names another QEMU is behind the record (the
// Computer reconciler reports the new one soon) or ahead of it; either way
// that guest is not pushed to until the two agree.
func (r *Reconciler) target(ctx context.Context, c *dotsv1.Computer, token string) (guestclient.Target, error) {
	if r.VMs == nil {
		return guestclient.Target{}, errors.New("this host agent has no VM driver to read the VM's record from")
	}
	t, err := r.VMs.GuestTarget(ctx, computer.VMID(c), token)
	if err != nil {
		return guestclient.Target{}, err
	}
	if t.PID != int(c.Status.PID) || t.Port != int(c.Status.GuestPort) {
		return guestclient.Target{}, fmt.Errorf("the VM's record names QEMU pid %d on port %d, the Computer's status pid %d on port %d", t.PID, t.Port, c.Status.PID, c.Status.GuestPort)
	}
	return t, nil
}

// computerNotReady says why a Computer's guest cannot be reached yet, or ""
// when it can: Ready, RUNNING, with a QEMU and a port on record.
func computerNotReady(c *dotsv1.Computer) string {
	r := meta.FindStatusCondition(c.Status.Conditions, dotsv1.ReadyCondition)
	switch {
	case r == nil:
		return "it has reported no state yet"
	case r.Status != metav1.ConditionTrue:
		return cmp.Or(r.Message, r.Reason)
	case c.Status.State != dotsv1.ComputerRunning:
		return "its state is " + string(c.Status.State)
	case c.Status.PID == 0 || c.Status.GuestPort == 0:
		return "no QEMU or guest port on record"
	}
	return ""
}

// writeStatus sets the three conditions from the scope and writes them, once.
func (r *Reconciler) writeStatus(ctx context.Context, s *scope, res ctrl.Result, reterr error) (ctrl.Result, error) {
	if !s.decided {
		return res, reterr
	}
	dot := s.dot
	helper := patch.NewHelper(r.Client, writer, dot)
	before := map[string]*metav1.Condition{}
	for _, t := range writer.Conditions {
		before[t] = meta.FindStatusCondition(dot.Status.Conditions, t)
	}
	now := r.Clock.Now()
	for _, c := range []struct {
		typ string
		c   cond
	}{{dotsv1.KeyPushedCondition, s.key}, {dotsv1.ConfigAppliedCondition, s.config}, {dotsv1.AgentReadyCondition, s.agent}} {
		if c.c.status == "" {
			continue
		}
		patch.SetCondition(dot, now, c.typ, c.c.status, c.c.reason, c.c.message)
		if c.c.generation != 0 {
			meta.FindStatusCondition(dot.Status.Conditions, c.typ).ObservedGeneration = c.c.generation
		}
	}
	written, err := helper.Patch(ctx, dot)
	switch {
	case written:
		r.recordTransitions(dot, before)
	case apierrors.IsConflict(err):
		return ctrl.Result{RequeueAfter: patch.ConflictRetry}, reterr
	case err != nil && !apierrors.IsNotFound(err):
		return res, kerrors.NewAggregate([]error{reterr, err})
	}
	return res, reterr
}

// recordTransitions makes Kubernetes Events of the milestones, so kubectl
// describe tells the story: the engine ready, a push that failed, a Dot that
// waits for its key.
func (r *Reconciler) recordTransitions(dot *dotsv1.Dot, before map[string]*metav1.Condition) {
	if r.Recorder == nil {
		return
	}
	changed := func(typ string) *metav1.Condition {
		now := meta.FindStatusCondition(dot.Status.Conditions, typ)
		was := before[typ]
		if now == nil || (was != nil && was.Status == now.Status && was.Reason == now.Reason && was.Message == now.Message) {
			return nil
		}
		return now
	}
	if c := changed(dotsv1.AgentReadyCondition); c != nil && c.Status == metav1.ConditionTrue {
		r.Recorder.Eventf(dot, nil, corev1.EventTypeNormal, "AgentReady", "Push", "the key and the configuration reached the guest and %s", c.Message)
	}
	for _, typ := range writer.Conditions {
		if c := changed(typ); c != nil && (c.Reason == dotsv1.PushFailedReason || c.Reason == dotsv1.NoKeyReason || c.Reason == dotsv1.KeyUnusableReason || c.Reason == dotsv1.ConfigInvalidReason) {
			r.Recorder.Eventf(dot, nil, corev1.EventTypeWarning, c.Reason, "Push", "%s", c.Message)
		}
	}
}

// secretsChanged lets through a Dot whose Secret the control plane wrote:
// its secrets are pushed again without waiting for the poll.
var secretsChanged = predicate.Funcs{
	CreateFunc:  func(event.CreateEvent) bool { return false },
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		return e.ObjectOld.GetAnnotations()[dotsv1.SecretsChangedAnnotation] != e.ObjectNew.GetAnnotations()[dotsv1.SecretsChangedAnnotation]
	},
}

// computerChanged lets through what can change whether and where its guest
// is reached: its creation and deletion, its Ready condition, its QEMU and
// its port.
var computerChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*dotsv1.Computer)
		n, ok2 := e.ObjectNew.(*dotsv1.Computer)
		if !ok1 || !ok2 {
			return true
		}
		return computerNotReady(o) != computerNotReady(n) || o.Status.PID != n.Status.PID || o.Status.GuestPort != n.Status.GuestPort
	},
}
