package controllers

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/lifecycle"
	"github.com/invisible-dots/invisible-dots/internal/lifecycle/projection"
	"github.com/invisible-dots/invisible-dots/internal/patch"
	"github.com/invisible-dots/invisible-dots/internal/store"
)

// DelegationControllerName names the reconciler of the requests Dots make
// of each other (delegate_task).
const DelegationControllerName = "delegation-controller"

// delegationWriter owns a Task's delegatedSpentUSD; no conditions.
var delegationWriter = patch.Writer{Name: DelegationControllerName + "/task"}

// DelegationReconciler keeps the requests a Dot (the asker) makes of other
// Dots of its namespace, keyed by the asker:
//   - each delegate_task call its log holds is decided once, at the moment
//     it is read (lifecycle.DecideDelegation: both Dots' consent, the
//     asker's permission, depth and fan-out): passed on as the receiver's
//     Task, named for the call and labelled with the asker, or refused; the
//     asker is told either way by a system.event whose outbox row is the
//     record of the decision;
//   - a request's Task that ended brings the asker its answer (a
//     system.event of id delegation-<task UID>);
//   - a request whose asker's task was cancelled, or whose pair no longer
//     consents, is asked to cancel (the requests it made in turn follow at
//     their own asker's reconcile);
//   - each of the asker's Tasks shows its requests' spend, theirs included,
//     as status.delegatedSpentUSD.
type DelegationReconciler struct {
	Client   client.Client
	Log      *WorkLog
	Store    *store.Store
	Recorder recorder.EventRecorder

	// sent remembers outbox ids known stored, so a steady state reads and
	// writes no row again; lost with the process, the rows themselves are
	// the record.
	sent sync.Map
}

// What the reconciler reads and writes beside a Dot's work's (WorkLog).
// +kubebuilder:rbac:groups=dots.invisible.dev,resources=tasks,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups=dots.invisible.dev,resources=tasks/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=dots.invisible.dev,resources=dots;approvals,verbs=get;list;watch

// SetupWithManager registers the reconciler: the asker, new events in its
// log, its own Tasks (a cancel), the Tasks it asked for (their end, their
// spend) and the Dots it asked (their consent) wake it.
func (r *DelegationReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&dotsv1.Dot{}).
		Watches(&dotsv1.Task{}, batched(taskBatch, delegationTaskDots)).
		Watches(&dotsv1.Dot{}, handler.EnqueueRequestsFromMapFunc(r.askersOf)).
		WatchesRawSource(r.Log.source()).
		Named(DelegationControllerName).
		Complete(r)
}

// delegationTaskDots wakes a Task's own Dot (its cancel, its spend) and the
// Dot that asked for it.
func delegationTaskDots(_ context.Context, o client.Object) []reconcile.Request {
	t, ok := o.(*dotsv1.Task)
	if !ok {
		return nil
	}
	out := []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: t.Namespace, Name: t.Spec.DotName}}}
	if asker := t.Labels[dotsv1.RequestedByLabel]; asker != "" {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: t.Namespace, Name: asker}})
	}
	return out
}

// askersOf wakes the Dots a changed Dot accepts requests from, and those
// with requests open to it: its consent may have changed.
func (r *DelegationReconciler) askersOf(ctx context.Context, o client.Object) []reconcile.Request {
	dot, ok := o.(*dotsv1.Dot)
	if !ok {
		return nil
	}
	names := map[string]bool{}
	if dot.Spec.Delegation != nil {
		for _, n := range dot.Spec.Delegation.AcceptsFrom {
			names[n] = true
		}
	}
	if tasks, err := r.Log.dotTasks(ctx, r.Client, dot); err == nil {
		for _, t := range tasks {
			if asker := t.Labels[dotsv1.RequestedByLabel]; asker != "" {
				names[asker] = true
			}
		}
	}
	// The Dots it asked: an asker going away cancels its requests there.
	var asked dotsv1.TaskList
	if err := r.Client.List(ctx, &asked, client.InNamespace(dot.Namespace), client.MatchingLabels{dotsv1.RequestedByLabel: dot.Name}); err == nil {
		for _, t := range asked.Items {
			names[t.Spec.DotName] = true
		}
	}
	out := make([]reconcile.Request, 0, len(names))
	for n := range names {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: dot.Namespace, Name: n}})
	}
	return out
}

// Reconcile decides the asker's new requests and keeps its open ones.
func (r *DelegationReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	in, err := openWork(ctx, r.Client, r.Log, req, true, false)
	if in == nil || err != nil {
		return ctrl.Result{}, err
	}
	defer in.Close()
	children, err := r.children(ctx, in.Dot)
	if err != nil {
		return ctrl.Result{}, err
	}
	steps := &workSteps{}
	steps.run("decide the requests of other Dots", r.decideRequests(ctx, in, &children))
	steps.run("answer the requests that ended", r.answerEnded(ctx, in.Dot, children))
	steps.run("cancel the requests no longer wanted", r.cancelUnwanted(ctx, in.Dot, in.Tasks, children))
	steps.run("write the delegated spend", r.writeSpend(ctx, in.Tasks, children))
	steps.run("cancel the requests of askers gone", r.cancelOrphans(ctx, in.Dot, in.Tasks))
	return steps.result(ctx, r.Recorder, in.Dot, ctrl.Result{})
}

// children are the Tasks the asker asked for, in its namespace.
func (r *DelegationReconciler) children(ctx context.Context, asker *dotsv1.Dot) ([]dotsv1.Task, error) {
	tasks, err := r.Log.requestedBy(ctx, r.Client, asker)
	if err != nil {
		return nil, err
	}
	out := tasks[:0]
	for _, t := range tasks {
		if t.Spec.RequestedBy != nil && t.Spec.RequestedBy.Dot == asker.Name && t.DeletionTimestamp.IsZero() {
			out = append(out, t)
		}
	}
	return out, nil
}

// isSent says whether the asker's outbox holds the row id (remembered, or
// read from the store).
func (r *DelegationReconciler) isSent(ctx context.Context, dotUID, id string) (bool, error) {
	if _, ok := r.sent.Load(id); ok {
		return true, nil
	}
	_, err := r.Store.Inbound(ctx, dotUID, id)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	r.sent.Store(id, true)
	return true, nil
}

// send enqueues a delegation system.event for the asker, once by its id.
func (r *DelegationReconciler) send(ctx context.Context, w *DotWork, id string, d protocol.Delegation) error {
	data, err := json.Marshal(d)
	if err != nil {
		return err
	}
	body, err := json.Marshal(protocol.SystemEvent{Name: protocol.SystemEventDelegation, Data: data})
	if err != nil {
		return err
	}
	if err := w.Decide(ctx, &store.Inbound{ID: id, Dot: w.id, Type: protocol.InboundSystemEvent, Data: body}); err != nil {
		return err
	}
	r.sent.Store(id, true)
	r.Log.Wake(ctx, w.id.Namespace, w.id.Name)
	return nil
}

// decideRequests decides each delegate_task call of the asker's log not yet
// decided. The receiver's Task is made first and the decision's row after
// it: a control plane stopped between the two finds the Task made (its
// name is the call's) and owes only the row.
func (r *DelegationReconciler) decideRequests(ctx context.Context, in *workInput, children *[]dotsv1.Task) error {
	asker := in.Dot
	for _, call := range in.View().Delegations {
		id := lifecycle.DelegationDecisionID(string(asker.UID), call.EventID)
		sent, err := r.isSent(ctx, string(asker.UID), id)
		if err != nil || sent {
			if err != nil {
				return err
			}
			continue
		}
		args, argErr := lifecycle.ParseDelegationArgs(call.Arguments)
		name := lifecycle.DelegatedTaskName(args.Dot, string(asker.UID), call.EventID)
		var d lifecycle.DelegationDecision
		var usedApproval string
		if argErr != nil {
			d.Refused = argErr.Error()
		} else {
			err = r.Client.Get(ctx, types.NamespacedName{Namespace: asker.Namespace, Name: name}, &dotsv1.Task{})
			switch {
			case err == nil:
				// Made before a stop: only the row is owed.
				if err := r.send(ctx, in.DotWork, id, accepted(args.Dot, name)); err != nil {
					return err
				}
				continue
			case !apierrors.IsNotFound(err):
				return err
			}
			facts, approval, err := r.facts(ctx, in, args, call, *children)
			if err != nil {
				return err
			}
			usedApproval = approval
			facts.Open = openCount(*children)
			d = lifecycle.DecideDelegation(args, facts)
		}
		if d.Refused != "" {
			who := cmp.Or(args.Dot, "another Dot")
			r.Recorder.Eventf(asker, nil, corev1.EventTypeWarning, "DelegationRefused", "Delegate",
				"Dot %s asked %s for a task; refused: %s", asker.Name, who, d.Refused)
			text := fmt.Sprintf("Your request to %s was not passed on: %s.", who, d.Refused)
			if err := r.send(ctx, in.DotWork, id, protocol.Delegation{Dot: who, Outcome: protocol.DelegationRefused, Text: text}); err != nil {
				return err
			}
			continue
		}
		task := &dotsv1.Task{
			ObjectMeta: metav1.ObjectMeta{Namespace: asker.Namespace, Name: name,
				Labels: map[string]string{dotsv1.RequestedByLabel: asker.Name}},
			Spec: dotsv1.TaskSpec{DotName: args.Dot, Description: args.Description, Priority: args.Priority,
				RequestedBy: &dotsv1.TaskRequester{Dot: asker.Name, Task: taskNameOf(in.Tasks, call.TaskID), Depth: d.Depth, Event: call.EventID}},
		}
		if usedApproval != "" && lifecycle.SpecPermission(asker.Spec, lifecycle.DelegatePermission) == protocol.Ask {
			task.Annotations = map[string]string{dotsv1.DelegationApprovalAnnotation: usedApproval}
		}
		if err := r.Client.Create(ctx, task); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("make the task %s asked of %s: %w", name, args.Dot, err)
		}
		*children = append(*children, *task)
		r.Recorder.Eventf(asker, nil, corev1.EventTypeNormal, "Delegated", "Delegate", "Dot %s asked %s for a task: %s", asker.Name, args.Dot, name)
		if err := r.send(ctx, in.DotWork, id, accepted(args.Dot, name)); err != nil {
			return err
		}
	}
	return nil
}

func accepted(receiver, task string) protocol.Delegation {
	return protocol.Delegation{Dot: receiver, Task: task, Outcome: protocol.DelegationAccepted,
		Text: fmt.Sprintf("Your request was passed on to %s as its task %s.", receiver, task)}
}

// facts reads what the decision on one call needs, now.
func (r *DelegationReconciler) facts(ctx context.Context, in *workInput, args lifecycle.DelegationArgs, call projection.Delegation,
	children []dotsv1.Task) (lifecycle.DelegationFacts, string, error) {
	f := lifecycle.DelegationFacts{Asker: in.Dot.Name, AskerSpec: in.Dot.Spec}
	receiver := &dotsv1.Dot{}
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: in.Dot.Namespace, Name: args.Dot}, receiver)
	switch {
	case err == nil && receiver.DeletionTimestamp.IsZero():
		f.Receiver = &receiver.Spec
	case err != nil && !apierrors.IsNotFound(err):
		return f, "", err
	}
	for _, t := range in.Tasks {
		if string(t.UID) == call.TaskID && t.Spec.RequestedBy != nil {
			f.ParentDepth = t.Spec.RequestedBy.Depth
		}
	}
	approval, err := r.approval(ctx, in.Dot, call.Arguments, children)
	if err != nil {
		return f, "", err
	}
	f.Approved = approval != ""
	return f, approval, nil
}

// approval is the Approval a person gave of a delegate_task call of the
// asker with exactly these arguments (equal as JSON values) that no request
// used yet (a request's Task names the approval it used), "" for none.
func (r *DelegationReconciler) approval(ctx context.Context, asker *dotsv1.Dot, args json.RawMessage, children []dotsv1.Task) (string, error) {
	approvals, err := dotApprovals(ctx, r.Client, asker)
	if err != nil {
		return "", err
	}
	var want any
	if json.Unmarshal(args, &want) != nil {
		return "", nil
	}
	used := map[string]bool{}
	for _, c := range children {
		if a := c.Annotations[dotsv1.DelegationApprovalAnnotation]; a != "" {
			used[a] = true
		}
	}
	for _, a := range approvals {
		if a.Spec.Tool != lifecycle.DelegateTool || a.Spec.Decision != dotsv1.Approve || a.Spec.Arguments == nil || used[a.Name] {
			continue
		}
		var got any
		if json.Unmarshal(a.Spec.Arguments.Raw, &got) == nil && jsonEqual(got, want) {
			return a.Name, nil
		}
	}
	return "", nil
}

func jsonEqual(a, b any) bool {
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && string(ja) == string(jb)
}

// taskNameOf is the name of the asker's Task of uid, "" for the chat or a
// Task gone.
func taskNameOf(tasks []*dotsv1.Task, uid string) string {
	for _, t := range tasks {
		if uid != "" && string(t.UID) == uid {
			return t.Name
		}
	}
	return ""
}

func openCount(children []dotsv1.Task) int {
	n := 0
	for _, c := range children {
		if !c.Status.Phase.Ended() {
			n++
		}
	}
	return n
}

// answerEnded brings the asker the end of each request's Task.
func (r *DelegationReconciler) answerEnded(ctx context.Context, asker *dotsv1.Dot, children []dotsv1.Task) error {
	for _, c := range children {
		if !c.Status.Phase.Ended() {
			continue
		}
		id := lifecycle.DelegationAnswerID(string(c.UID))
		if _, ok := r.sent.Load(id); ok {
			continue
		}
		answer := lifecycle.DelegationAnswer(c.Spec.DotName, c.Name, c.Status.Phase, c.Status.Summary, c.Status.Error)
		if _, err := r.Store.Enqueue(ctx, delegationRow(storeDot(asker), id, answer)); err != nil {
			return err
		}
		r.sent.Store(id, true)
		r.Log.Wake(ctx, asker.Namespace, asker.Name)
	}
	return nil
}

func delegationRow(dot store.Dot, id string, d protocol.Delegation) store.Inbound {
	data, _ := json.Marshal(d)
	body, _ := json.Marshal(protocol.SystemEvent{Name: protocol.SystemEventDelegation, Data: data})
	return store.Inbound{ID: id, Dot: dot, Type: protocol.InboundSystemEvent, Data: body}
}

// cancelUnwanted asks each open request to cancel when the asker's task it
// was made in is cancelled or gone, or when the pair no longer consents;
// the asker is told of a consent taken back.
func (r *DelegationReconciler) cancelUnwanted(ctx context.Context, asker *dotsv1.Dot, tasks []*dotsv1.Task, children []dotsv1.Task) error {
	byName := map[string]*dotsv1.Task{}
	for _, t := range tasks {
		byName[t.Name] = t
	}
	receivers := map[string]*dotsv1.DotSpec{}
	receiverSpec := func(name string) (*dotsv1.DotSpec, error) {
		if s, ok := receivers[name]; ok {
			return s, nil
		}
		d := &dotsv1.Dot{}
		err := r.Client.Get(ctx, types.NamespacedName{Namespace: asker.Namespace, Name: name}, d)
		var spec *dotsv1.DotSpec
		switch {
		case err == nil && d.DeletionTimestamp.IsZero():
			spec = &d.Spec
		case err != nil && !apierrors.IsNotFound(err):
			return nil, err
		}
		receivers[name] = spec
		return spec, nil
	}
	for i := range children {
		c := &children[i]
		if c.Status.Phase.Ended() || c.Spec.CancelRequested {
			continue
		}
		spec, err := receiverSpec(c.Spec.DotName)
		if err != nil {
			return err
		}
		why := ""
		if ok, reason := lifecycle.Consent(asker.Name, asker.Spec, c.Spec.DotName, spec); !ok {
			why = reason
		} else if parent := c.Spec.RequestedBy.Task; parent != "" {
			if p, ok := byName[parent]; !ok || p.Spec.CancelRequested || p.Status.Phase == dotsv1.TaskCancelled {
				why = "parent"
			}
		}
		if why == "" {
			continue
		}
		if why != "parent" {
			// Told before the cancel is asked, once by its id: a stop
			// between the two tells it again, never loses it.
			id := lifecycle.DelegationRevokedID(string(c.UID))
			text := fmt.Sprintf("Your request to %s (its task %s) was cancelled: %s.", c.Spec.DotName, c.Name, why)
			if _, err := r.Store.Enqueue(ctx, delegationRow(storeDot(asker), id, protocol.Delegation{Dot: c.Spec.DotName, Task: c.Name,
				Outcome: string(dotsv1.TaskCancelled), Text: text})); err != nil {
				return err
			}
			r.Log.Wake(ctx, asker.Namespace, asker.Name)
		}
		before := c.DeepCopy()
		c.Spec.CancelRequested = true
		if err := r.Client.Patch(ctx, c, client.MergeFrom(before)); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("cancel the task %s asked of %s: %w", c.Name, c.Spec.DotName, err)
		}
		if why == "parent" {
			r.Recorder.Eventf(c, nil, corev1.EventTypeNormal, "Cancelled", "Delegate", "the task of %s it was asked for was cancelled", asker.Name)
		} else {
			r.Recorder.Eventf(c, nil, corev1.EventTypeNormal, "ConsentRevoked", "Delegate", "cancelled: %s", why)
		}
	}
	return nil
}

// writeSpend writes on each of the asker's Tasks the spend of the requests
// made in it, each request's own and its requests', recomputed from them.
func (r *DelegationReconciler) writeSpend(ctx context.Context, tasks []*dotsv1.Task, children []dotsv1.Task) error {
	spent := map[string]float64{}
	for _, c := range children {
		if p := c.Spec.RequestedBy.Task; p != "" {
			spent[p] += c.Status.SpentUSD + c.Status.DelegatedSpentUSD
		}
	}
	for i := range tasks {
		usd := protocol.RoundUSD(spent[tasks[i].Name])
		if tasks[i].Status.DelegatedSpentUSD == usd {
			continue
		}
		t := tasks[i].DeepCopy() // the cache's own (dotTasks)
		helper := patch.NewHelper(r.Client, delegationWriter, t)
		t.Status.DelegatedSpentUSD = usd
		if _, err := helper.Patch(ctx, t); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}

// cancelOrphans asks the Dot's own open requests to cancel when the Dot that
// asked for them is gone: nobody is left to take the answer (its tasks went
// with it).
func (r *DelegationReconciler) cancelOrphans(ctx context.Context, dot *dotsv1.Dot, tasks []*dotsv1.Task) error {
	gone := map[string]bool{}
	for _, t := range tasks {
		rb := t.Spec.RequestedBy
		if rb == nil || t.Status.Phase.Ended() || t.Spec.CancelRequested || !t.DeletionTimestamp.IsZero() {
			continue
		}
		isGone, seen := gone[rb.Dot]
		if !seen {
			asker := &dotsv1.Dot{}
			err := r.Client.Get(ctx, types.NamespacedName{Namespace: dot.Namespace, Name: rb.Dot}, asker)
			if err != nil && !apierrors.IsNotFound(err) {
				return err
			}
			isGone = err != nil || !asker.DeletionTimestamp.IsZero()
			gone[rb.Dot] = isGone
		}
		if !isGone {
			continue
		}
		before, t := t, t.DeepCopy() // the cache's own (dotTasks)
		t.Spec.CancelRequested = true
		if err := r.Client.Patch(ctx, t, client.MergeFrom(before)); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("cancel the task %s asked by %s, which is gone: %w", t.Name, rb.Dot, err)
		}
		r.Recorder.Eventf(t, nil, corev1.EventTypeNormal, "Cancelled", "Delegate", "Dot %s, which asked for it, is gone", rb.Dot)
	}
	return nil
}
