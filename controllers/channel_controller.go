package controllers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
	"sigs.k8s.io/controller-runtime/pkg/source"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/internal/channels"
	"github.com/invisible-dots/invisible-dots/internal/channels/hub"
	"github.com/invisible-dots/invisible-dots/internal/channels/port"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
	"github.com/invisible-dots/invisible-dots/internal/eventtext"
	"github.com/invisible-dots/invisible-dots/internal/patch"
	"github.com/invisible-dots/invisible-dots/internal/store"
)

// ChannelControllerName names the Channel reconciler.
const ChannelControllerName = "channel-controller"

// ChannelReconciler runs each Channel's link in the channel hub (ref 9.8)
// as its spec says (started, started again with new credentials or
// settings, paused, stopped when it goes) and writes back what the hub
// observed: the link's state, the account, the people paired. A deleted
// Channel is held (its finalizer) until the hub stopped its link and forgot
// its rows; its Secret goes with it (it owns it).
type ChannelReconciler struct {
	Client client.Client
	// SecretReader reads the credentials' Secret from the API server, not
	// a cache: the manager caches no Secret.
	SecretReader client.Reader
	Store        *store.Store
	Hub          *hub.Hub
	// Links are the link codes of Channels linked by a code, forgotten
	// when a Channel goes; nil when the server links none.
	Links    *port.Links
	Recorder recorder.EventRecorder
	Clock    clock.PassiveClock

	wakes chan event.TypedGenericEvent[*dotsv1.Channel]
}

// +kubebuilder:rbac:groups=dots.invisible.dev,resources=channels,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=dots.invisible.dev,resources=channels/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=dots.invisible.dev,resources=channels/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;create;update

// SetupWithManager registers the reconciler, woken by the hub when a link's
// status changes or a person pairs.
func (r *ChannelReconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.wakes = make(chan event.TypedGenericEvent[*dotsv1.Channel], 64)
	r.Hub.Changed = func(namespace, name string) {
		ch := &dotsv1.Channel{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
		select {
		case r.wakes <- event.TypedGenericEvent[*dotsv1.Channel]{Object: ch}:
		default:
			// Full: the controller has wakes queued, and each reconcile
			// reads the hub's latest.
		}
	}
	// A device linked by a code keeps its keys in a Secret the Channel
	// owns, and shows its codes to whoever links it.
	r.Hub.Devices = func(cfg hub.Config) (port.KeyStore, port.Linking) {
		keys := &ChannelKeys{Client: r.Client, Reader: r.SecretReader, Namespace: cfg.Namespace, Name: cfg.Name, UID: cfg.Binding.UID}
		var linking port.Linking
		if r.Links != nil {
			linking = r.Links.For(cfg.Binding.UID)
		}
		return keys, linking
	}
	if err := mgr.Add(r.Hub); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&dotsv1.Channel{}).
		WatchesRawSource(source.Channel(r.wakes, &handler.TypedEnqueueRequestForObject[*dotsv1.Channel]{})).
		// A Channel whose Dot is not there yet (applied before it, or
		// made just after it, before this cache saw it) links once the
		// Dot comes; one whose Dot goes is paused at once.
		Watches(&dotsv1.Dot{}, handler.EnqueueRequestsFromMapFunc(r.channelsOfDot), builder.WithPredicates(dotComesOrGoes)).
		Named(ChannelControllerName).
		WithOptions(controller.Options{MaxConcurrentReconciles: concurrentReconciles}).
		Complete(r)
}

// channelsOfDot are the Channels bound to the Dot o.
func (r *ChannelReconciler) channelsOfDot(ctx context.Context, o client.Object) []reconcile.Request {
	return boundTo(ctx, r.Client, o, &dotsv1.ChannelList{}, func(x client.Object) string { return x.(*dotsv1.Channel).Spec.DotName })
}

// The conditions the Channel reconciler owns.
var channelWriter = patch.Writer{Name: ChannelControllerName, Conditions: []string{dotsv1.ReadyCondition}}

// channelEventReason is the Kubernetes Event's reason for each state.
var channelEventReason = map[dotsv1.ChannelState]string{
	dotsv1.ChannelConnected:   "Connected",
	dotsv1.ChannelPaused:      "Paused",
	dotsv1.ChannelNeedsRelink: "NeedsRelink",
	dotsv1.ChannelError:       "LinkFailed",
}

// notLeadingRetry is how soon a Channel is tried again while the hub has
// not started (it starts with the lead).
const notLeadingRetry = time.Second

// Reconcile runs the Channel's link as its spec says and records it.
func (r *ChannelReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	ch := &dotsv1.Channel{}
	if err := r.Client.Get(ctx, req.NamespacedName, ch); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	uid := string(ch.UID)
	if !ch.DeletionTimestamp.IsZero() {
		if !slices.Contains(ch.Finalizers, dotsv1.ChannelFinalizer) {
			return ctrl.Result{}, nil
		}
		r.Hub.Stop(uid)
		if r.Links != nil {
			r.Links.Forget(uid)
		}
		if err := r.Store.ForgetChannel(ctx, uid); err != nil {
			return ctrl.Result{}, err
		}
		return ctrl.Result{}, client.IgnoreNotFound(patch.RemoveFinalizer(ctx, r.Client, ch, dotsv1.ChannelFinalizer))
	}
	if added, err := patch.EnsureFinalizer(ctx, r.Client, ch, dotsv1.ChannelFinalizer); added || err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	helper := patch.NewHelper(r.Client, channelWriter, ch)
	before := ch.Status.State
	state, detail, res, err := r.run(ctx, ch)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := r.observe(ctx, ch, state, detail); err != nil {
		return ctrl.Result{}, err
	}
	if _, err := helper.Patch(ctx, ch); err != nil {
		return patch.RequeueOnConflict(ctrl.Result{}, err)
	}
	// Told once the status that says it is written.
	if st := ch.Status.State; st != before && st != dotsv1.ChannelConnecting {
		kind := corev1.EventTypeNormal
		if st == dotsv1.ChannelError || st == dotsv1.ChannelNeedsRelink {
			kind = corev1.EventTypeWarning
		}
		note := eventtext.ChannelStatusLine(wire.ChannelStatus{Kind: string(ch.Spec.Type), State: string(st), Detail: ch.Status.Detail})
		r.Recorder.Eventf(ch, nil, kind, channelEventReason[st], "Link", "%s", note)
	}
	return res, nil
}

// run starts, restarts or stops the link as the spec says; a state other
// than "" is the Channel's state when the hub runs nothing for it.
func (r *ChannelReconciler) run(ctx context.Context, ch *dotsv1.Channel) (dotsv1.ChannelState, string, ctrl.Result, error) {
	uid := string(ch.UID)
	stop := func(state dotsv1.ChannelState, detail string) (dotsv1.ChannelState, string, ctrl.Result, error) {
		r.Hub.Stop(uid)
		return state, detail, ctrl.Result{}, nil
	}
	dot := &dotsv1.Dot{}
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: ch.Namespace, Name: ch.Spec.DotName}, dot); err != nil {
		if apierrors.IsNotFound(err) {
			return stop(dotsv1.ChannelError, fmt.Sprintf("there is no Dot %s in namespace %s", ch.Spec.DotName, ch.Namespace))
		}
		return "", "", ctrl.Result{}, err
	}
	if !dot.DeletionTimestamp.IsZero() {
		return stop(dotsv1.ChannelPaused, "its Dot is being deleted")
	}
	if !ch.Spec.IsEnabled() {
		return stop(dotsv1.ChannelPaused, "")
	}
	k, ok := r.Hub.Kinds[string(ch.Spec.Type)]
	if !ok {
		detail := "this server does not run " + wire.ChannelKindName(string(ch.Spec.Type)) + " channels"
		if ch.Spec.Type == dotsv1.ChannelWhatsApp {
			detail = hub.WhatsAppOff
		}
		return stop(dotsv1.ChannelError, detail)
	}
	// A kind linked by a code tells its account itself (hub.Account): the
	// status's copy is not what it runs from, or writing it would start
	// the link again.
	link := hub.Link{}
	if k.LinkedBy == hub.LinkedByToken {
		if a := ch.Status.Account; a != nil {
			link.Account = channels.Account{ID: a.ID, Name: a.Name}
		}
		token, problem, err := r.token(ctx, ch)
		if err != nil {
			return "", "", ctrl.Result{}, err
		}
		if problem != "" {
			return stop(dotsv1.ChannelNeedsRelink, problem)
		}
		if link.Account.ID == "" {
			return stop(dotsv1.ChannelNeedsRelink, "the Channel has no checked account: give it its token again (invisible-dots channel add, or PUT .../credentials)")
		}
		link.Token = token
	}
	s := ch.Spec.Settings
	err := r.Hub.Ensure(hub.Config{
		Namespace: ch.Namespace, Name: ch.Name,
		Binding: hub.Binding{UID: uid, Kind: string(ch.Spec.Type), Dot: storeDot(dot)},
		Link:    link, CredentialsGiven: ch.Annotations[dotsv1.ChannelCredentialsAnnotation], NotifyTasks: s.NotifyTasksOn(), AskInChat: s.ApprovalsOn(), ShowArguments: s.ShowArgumentsOn(),
	})
	if errors.Is(err, hub.ErrNotLeading) {
		return dotsv1.ChannelConnecting, "", ctrl.Result{RequeueAfter: notLeadingRetry}, nil
	}
	if err != nil {
		return stop(dotsv1.ChannelError, err.Error())
	}
	return "", "", ctrl.Result{}, nil
}

// token reads the Channel's token from the Secret it owns; problem says
// why there is none a person can act on.
func (r *ChannelReconciler) token(ctx context.Context, ch *dotsv1.Channel) (token, problem string, err error) {
	name := ch.Spec.CredentialsSecretName
	if name == "" {
		return "", "the Channel names no credentials' Secret: give it its token (invisible-dots channel add, or PUT .../credentials)", nil
	}
	sec := &corev1.Secret{}
	err = r.SecretReader.Get(ctx, types.NamespacedName{Namespace: ch.Namespace, Name: name}, sec)
	if apierrors.IsNotFound(err) {
		return "", fmt.Sprintf("the credentials' Secret %s is gone: give the Channel its token again", name), nil
	}
	if err != nil {
		return "", "", fmt.Errorf("read the credentials of Channel %s/%s: %w", ch.Namespace, ch.Name, err)
	}
	// A Channel reads only a Secret it owns: one who may write Channels
	// cannot point one at another Secret of the namespace.
	if !metav1.IsControlledBy(sec, ch) {
		return "", fmt.Sprintf("the Secret %s is not this Channel's (it must be owned by it): give the Channel its token again", name), nil
	}
	token = string(sec.Data[dotsv1.ChannelCredentialsKey])
	if token == "" {
		return "", fmt.Sprintf("the Secret %s holds no %q: give the Channel its token again", name, dotsv1.ChannelCredentialsKey), nil
	}
	return token, "", nil
}

// maxPeople bounds the people copied to a Channel's status.
const maxPeople = 256

// observe writes what the hub and the database say into the status.
func (r *ChannelReconciler) observe(ctx context.Context, ch *dotsv1.Channel, state dotsv1.ChannelState, detail string) error {
	if state == "" {
		st, ok := r.Hub.Status(string(ch.UID))
		switch {
		case !ok || st.State == "":
			state = dotsv1.ChannelConnecting
		default:
			state, detail = dotsv1.ChannelState(st.State), st.Detail
		}
	}
	if state == dotsv1.ChannelConnected {
		detail = ""
	}
	ch.Status.State, ch.Status.Detail = state, detail
	if a, ok := r.Hub.Account(string(ch.UID)); ok {
		ch.Status.Account = &dotsv1.ChannelAccount{ID: a.ID, Name: a.Name}
	}
	peers, err := r.Store.Peers(ctx, string(ch.UID))
	if err != nil {
		return err
	}
	people := make([]dotsv1.ChannelPerson, 0, len(peers))
	for _, p := range peers {
		if len(people) == maxPeople {
			break
		}
		people = append(people, dotsv1.ChannelPerson{ID: p.ID, Label: p.Label, Role: p.Role, PairedAt: metav1.NewTime(p.At.UTC().Truncate(time.Second))})
	}
	if len(people) == 0 {
		people = nil
	}
	ch.Status.People = people
	ch.Status.ObservedGeneration = ch.Generation
	now := r.Clock.Now()
	switch state {
	case dotsv1.ChannelConnected:
		patch.SetCondition(ch, now, dotsv1.ReadyCondition, metav1.ConditionTrue, "Connected", "the link works")
	case dotsv1.ChannelPaused:
		msg := "paused: spec.enabled is false"
		if detail != "" {
			msg = detail
		}
		patch.SetCondition(ch, now, dotsv1.ReadyCondition, metav1.ConditionFalse, "Paused", msg)
	case dotsv1.ChannelNeedsRelink:
		patch.SetCondition(ch, now, dotsv1.ReadyCondition, metav1.ConditionFalse, "NeedsRelink", detail)
	case dotsv1.ChannelError:
		patch.SetCondition(ch, now, dotsv1.ReadyCondition, metav1.ConditionFalse, "Failed", detail)
	default:
		patch.SetCondition(ch, now, dotsv1.ReadyCondition, metav1.ConditionUnknown, "Connecting", "the link is starting")
	}
	return nil
}
