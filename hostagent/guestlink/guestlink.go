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
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
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
	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/hostagent/computer"
	"github.com/invisible-dots/invisible-dots/hostagent/crashpoint"
	"github.com/invisible-dots/invisible-dots/hostagent/guestclient"
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
	// startingPoll: the engine said it is starting.
	startingPoll = time.Second
	// defaultCallTimeout bounds one call to the guest.
	defaultCallTimeout = 10 * time.Second
	// maxRounds bounds the pushes of one reconcile when the Dot or its
	// Secrets keep changing under it; the next reconcile goes on.
	maxRounds = 5
)

// Notice is what the guest link tells its listeners of one Dot's guest,
// each time it looks at the Dot: whether the Dot has a guest on this host
// that may be reached, and whether the READY procedure completed on it.
type Notice struct {
	Key types.NamespacedName
	// DotUID is the Dot's UID; empty when the Dot is gone.
	DotUID types.UID
	// Target is the guest: its QEMU, port and token. It is zero when the
	// Dot has no guest here to reach: its Computer is not RUNNING and
	// Ready, is another host's, or the Dot is gone or going.
	Target guestclient.Target
	// Ready: the READY procedure completed on this guest (the key and the
	// configuration reached it and the engine's health holds: AgentReady).
	Ready bool
}

// Listener hears of the guests of this host: the event pump starts and
// stops with them, the deliverer sends to the READY ones. GuestNotice is
// called from the reconciler's workers, in each Dot's order, again on every
// look (a listener acts on changes only); it must not block.
type Listener interface {
	GuestNotice(n Notice)
}

// Notices is a Listener for a loop of its own: it keeps the latest notice
// of each Dot until the loop takes it, and wakes the loop. The zero value
// is ready to use.
type Notices struct {
	mu     sync.Mutex
	latest map[types.NamespacedName]Notice
	wake   chan struct{}
}

// GuestNotice keeps n, over an earlier notice of the same Dot not taken yet.
func (l *Notices) GuestNotice(n Notice) {
	l.mu.Lock()
	if l.latest == nil {
		l.latest = map[types.NamespacedName]Notice{}
	}
	l.latest[n.Key] = n
	wake := l.wakeLocked()
	l.mu.Unlock()
	select {
	case wake <- struct{}{}:
	default:
	}
}

// Wake receives after a notice came.
func (l *Notices) Wake() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.wakeLocked()
}

func (l *Notices) wakeLocked() chan struct{} {
	if l.wake == nil {
		l.wake = make(chan struct{}, 1)
	}
	return l.wake
}

// Take returns the latest notice of each Dot heard of since the last Take.
func (l *Notices) Take() []Notice {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]Notice, 0, len(l.latest))
	for _, n := range l.latest {
		out = append(out, n)
	}
	clear(l.latest)
	return out
}

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
	// Listeners hear of each Dot's guest after every reconcile.
	Listeners []Listener

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
	// tokens caches each Computer's guest token by UID (it never changes).
	tokens   sync.Map
	requests chan event.GenericEvent
}

// record is what one guest holds, as far as this agent pushed it.
type record struct {
	// port, pid and startTicks name the guest (its QEMU): another one
	// holds nothing.
	port, pid  int
	startTicks uint64
	// secrets is the digest of the secrets the guest took; keyPushed says
	// whether it took any.
	keyPushed bool
	secrets   [sha256.Size]byte
	// generation is the Dot's generation whose configuration the guest
	// took; 0 when none.
	generation int64
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
	}
	if r.requests == nil {
		r.requests = make(chan event.GenericEvent, 1024)
	}
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
	// What the listeners hear once this reconcile ends: no guest, unless
	// the procedure below reaches one.
	notice := Notice{Key: req.NamespacedName}
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

	s := &scope{dot: dot, decided: true}
	defer func() {
		res, reterr = r.writeStatus(ctx, s, res, reterr)
	}()
	if why := computerNotReady(c); why != "" {
		r.forget(req.NamespacedName)
		msg := fmt.Sprintf("Computer %s is not Ready (%s): everything is pushed when it is", c.Name, why)
		for _, cd := range []*cond{&s.key, &s.config, &s.agent} {
			s.set(cd, metav1.ConditionFalse, dotsv1.ComputerNotReadyReason, msg)
		}
		return ctrl.Result{}, nil
	}
	token, err := r.token(ctx, c)
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
	notice = Notice{Key: req.NamespacedName, DotUID: dot.UID, Target: target, Ready: s.agent.status == metav1.ConditionTrue}
	return res, nil
}

func (r *Reconciler) notify(n Notice) {
	for _, l := range r.Listeners {
		l.GuestNotice(n)
	}
}

// target is the one place a Computer becomes a guest target (the READY
// pushes here, the pump, the deliverer and the Dots API's proxy all take
// it from the notice): the port and the QEMU's pid, start time and boot id
// from the VM's own record, which must name the QEMU the Computer's status
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

// desired is what a guest should hold for a Dot: its secrets and its
// runtime configuration. A problem stops the procedure at the step it
// belongs to.
type desired struct {
	secrets    secretSet
	config     protocol.RuntimeConfig
	generation int64
	keyProblem *keyProblem
	configErr  error
}

func (r *Reconciler) desired(ctx context.Context, dot *dotsv1.Dot) desired {
	d := desired{generation: dot.Generation}
	d.secrets, d.keyProblem = readSecrets(ctx, r.APIReader, dot)
	d.config, d.configErr = RuntimeConfig(dot)
	return d
}

// ready is the READY procedure: push what the guest lacks, again while the
// Dot or its Secrets change under the push, then ask the engine's health.
func (r *Reconciler) ready(ctx context.Context, s *scope, key types.NamespacedName, target guestclient.Target) ctrl.Result {
	want := r.desired(ctx, s.dot)
	for round := 1; ; round++ {
		if p := want.keyProblem; p != nil {
			s.set(&s.key, metav1.ConditionFalse, p.reason, p.message)
			s.set(&s.config, metav1.ConditionFalse, dotsv1.WaitingReason, "waits for the OpenRouter key (KeyPushed)")
			s.set(&s.agent, metav1.ConditionFalse, dotsv1.WaitingReason, "waits for the OpenRouter key (KeyPushed)")
			return ctrl.Result{RequeueAfter: keyPoll}
		}
		pushed, failed := r.push(ctx, s, key, target, want)
		if failed {
			return ctrl.Result{RequeueAfter: r.failed(key)}
		}
		if !pushed {
			break
		}
		// A key or a configuration stored while this ran must not be lost
		// in the window: read both again, and push again until a round
		// finds them as they were pushed (ref 9.3).
		fresh := &dotsv1.Dot{}
		if err := r.APIReader.Get(ctx, key, fresh); err != nil {
			// The status is written on what was read before; the next
			// reconcile reads again.
			return ctrl.Result{RequeueAfter: retryPoll}
		}
		next := r.desired(ctx, fresh)
		s.dot = fresh
		if next.keyProblem == nil && next.configErr == nil &&
			fresh.Generation == want.generation && next.secrets.digest == want.secrets.digest {
			break
		}
		if round == maxRounds {
			return ctrl.Result{RequeueAfter: time.Millisecond}
		}
		want = next
	}
	return r.health(ctx, s, key, target)
}

// push sends what the guest does not hold yet: the secrets when they are not
// the ones it took, the configuration when its generation is not the one it
// took. It reports whether it sent anything, and whether a push failed (the
// conditions then say which and why).
func (r *Reconciler) push(ctx context.Context, s *scope, key types.NamespacedName, target guestclient.Target, want desired) (pushed, failed bool) {
	rec := r.record(key, target)
	if !rec.keyPushed || rec.secrets != want.secrets.digest {
		if err := r.call(ctx, target, http.MethodPost, protocol.RouteSecrets, want.secrets.req, nil); err != nil {
			s.set(&s.key, metav1.ConditionFalse, dotsv1.PushFailedReason, guestclient.DescribeFailure("the guest did not take the OpenRouter key", http.MethodPost, protocol.RouteSecrets, err, r.callTimeout()))
			s.set(&s.config, metav1.ConditionFalse, dotsv1.WaitingReason, "waits for the OpenRouter key (KeyPushed)")
			s.set(&s.agent, metav1.ConditionFalse, dotsv1.WaitingReason, "waits for the OpenRouter key (KeyPushed)")
			return pushed, true
		}
		rec.keyPushed, rec.secrets = true, want.secrets.digest
		r.store(key, rec)
		pushed = true
		// What the guest holds is this agent's memory only: an agent
		// killed here pushes the key again (the engine takes the same key
		// as a no-op, ref 4.3) and then the config, and the Dot was not
		// READY meanwhile (its status is written after the procedure).
		crashpoint.Hit(crashpoint.ReadyKeyPushed)
	}
	msg := "the guest holds the OpenRouter key from " + want.secrets.keyFrom
	if n := want.secrets.mcpCount(); n > 0 {
		msg += fmt.Sprintf(" and %d MCP secret(s)", n)
	}
	s.set(&s.key, metav1.ConditionTrue, dotsv1.KeyPushedReason, msg)

	if want.configErr != nil {
		s.set(&s.config, metav1.ConditionFalse, dotsv1.ConfigInvalidReason, fmt.Sprintf("generation %d: %v", want.generation, want.configErr))
		s.set(&s.agent, metav1.ConditionFalse, dotsv1.WaitingReason, "waits for the configuration (ConfigApplied)")
		return pushed, true
	}
	if rec.generation != want.generation {
		if err := r.call(ctx, target, http.MethodPut, protocol.RouteConfig, want.config, nil); err != nil {
			s.set(&s.config, metav1.ConditionFalse, dotsv1.PushFailedReason,
				guestclient.DescribeFailure(fmt.Sprintf("the guest did not take the configuration of generation %d", want.generation), http.MethodPut, protocol.RouteConfig, err, r.callTimeout()))
			s.set(&s.agent, metav1.ConditionFalse, dotsv1.WaitingReason, "waits for the configuration (ConfigApplied)")
			return pushed, true
		}
		rec.generation = want.generation
		r.store(key, rec)
		pushed = true
	}
	s.set(&s.config, metav1.ConditionTrue, dotsv1.ConfigAppliedReason, fmt.Sprintf("the guest applied the configuration of generation %d", want.generation))
	s.config.generation = want.generation
	return pushed, false
}

// health requires the engine's own health: status ok, the key configured,
// and every check of its own passing (ref 9.3).
func (r *Reconciler) health(ctx context.Context, s *scope, key types.NamespacedName, target guestclient.Target) ctrl.Result {
	var h protocol.Health
	if err := r.call(ctx, target, http.MethodGet, protocol.RouteHealth, nil, &h); err != nil {
		s.set(&s.agent, metav1.ConditionFalse, dotsv1.AgentNotAnsweringReason, guestclient.DescribeFailure("the engine's health did not answer", http.MethodGet, protocol.RouteHealth, err, r.callTimeout()))
		return ctrl.Result{RequeueAfter: r.failed(key)}
	}
	if !h.OpenRouterConfigured {
		// It took the key, and holds none now: the engine restarted since
		// (its key lives in memory only). Push everything again.
		r.forget(key)
		s.set(&s.agent, metav1.ConditionFalse, dotsv1.AgentStartingReason, "the engine holds no OpenRouter key (it restarted since the push): pushing again")
		return ctrl.Result{RequeueAfter: startingPoll}
	}
	if h.Status != protocol.HealthOK {
		s.set(&s.agent, metav1.ConditionFalse, dotsv1.AgentStartingReason, fmt.Sprintf("the engine says %q", safeWord(h.Status)))
		return ctrl.Result{RequeueAfter: startingPoll}
	}
	var failing []string
	for _, c := range h.Checks {
		if !c.OK {
			f := safeWord(c.Name)
			if c.Detail != "" {
				f += ": " + clip(c.Detail, 200)
			}
			failing = append(failing, f)
		}
	}
	if len(failing) > 0 {
		s.set(&s.agent, metav1.ConditionFalse, dotsv1.AgentStartingReason, "the engine's checks do not pass: "+strings.Join(failing, "; "))
		return ctrl.Result{RequeueAfter: startingPoll}
	}
	s.set(&s.agent, metav1.ConditionTrue, dotsv1.AgentReadyReason, fmt.Sprintf("the engine is ready (state %s)", safeWord(string(h.State))))
	r.mu.Lock()
	delete(r.failures, key)
	r.mu.Unlock()
	return ctrl.Result{RequeueAfter: steadyPoll}
}

func (r *Reconciler) callTimeout() time.Duration { return cmp.Or(r.CallTimeout, defaultCallTimeout) }

func (r *Reconciler) call(ctx context.Context, t guestclient.Target, method, route string, in, out any) error {
	cctx, cancel := context.WithTimeout(ctx, r.callTimeout())
	defer cancel()
	return r.Guest.Agent(cctx, t, method, route, in, out)
}

// wordRE is what a word the engine reports looks like (a state, a check's
// name).
var wordRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,40}$`)

// safeWord keeps a word the engine reports to what the protocol's words
// look like.
func safeWord(s string) string {
	if wordRE.MatchString(s) {
		return s
	}
	return "?"
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// record returns what the guest holds as far as this agent knows: nothing
// when the guest is another QEMU than the one pushed to, or when it asked
// to be given everything again.
func (r *Reconciler) record(key types.NamespacedName, t guestclient.Target) record {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec, ok := r.pushed[key]
	if r.stale[key] || !ok || rec.port != t.Port || rec.pid != t.PID || rec.startTicks != t.StartTicks {
		delete(r.stale, key)
		rec = record{port: t.Port, pid: t.PID, startTicks: t.StartTicks}
		r.pushed[key] = rec
	}
	return rec
}

func (r *Reconciler) store(key types.NamespacedName, rec record) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stale[key] {
		// Asked again while this ran: the next reconcile pushes all.
		return
	}
	r.pushed[key] = rec
}

func (r *Reconciler) forget(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.pushed, key)
	delete(r.failures, key)
}

// failed counts a failed call to the Dot's guest and says when to try
// again: firstRetry, doubling with each failure in a row, up to retryPoll.
func (r *Reconciler) failed(key types.NamespacedName) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failures[key]++
	return retryWait(r.failures[key])
}

// retryWait is the wait after n failures in a row.
func retryWait(n int) time.Duration {
	d := firstRetry
	for i := 1; i < n && d < retryPoll; i++ {
		d *= 2
	}
	return min(d, retryPoll)
}

// token reads the Computer's guest token (its Secret is the Computer
// reconciler's, made before the VM's first start).
func (r *Reconciler) token(ctx context.Context, c *dotsv1.Computer) (string, error) {
	if tok, ok := r.tokens.Load(c.UID); ok {
		return tok.(string), nil
	}
	sec := &corev1.Secret{}
	key := client.ObjectKey{Namespace: c.Namespace, Name: computer.TokenSecretName(c.Name)}
	if err := r.APIReader.Get(ctx, key, sec); err != nil {
		return "", fmt.Errorf("read the guest-token secret %s: %w", key, err)
	}
	tok, err := computer.TokenIn(c, sec)
	if err != nil {
		return "", err
	}
	r.tokens.Store(c.UID, tok)
	return tok, nil
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
