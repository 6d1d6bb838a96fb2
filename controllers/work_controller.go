package controllers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
	"sigs.k8s.io/controller-runtime/pkg/source"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
	"github.com/invisible-dots/invisible-dots/internal/lifecycle"
	"github.com/invisible-dots/invisible-dots/internal/lifecycle/projection"
	"github.com/invisible-dots/invisible-dots/internal/patch"
	"github.com/invisible-dots/invisible-dots/internal/pgtext"
	"github.com/invisible-dots/invisible-dots/internal/store"
)

// WorkControllerName names the work reconciler.
const WorkControllerName = "work-controller"

// DotNameField indexes Tasks and Approvals by spec.dotName.
const DotNameField = "spec.dotName"

// The status writers of the work reconciler: fields its log gives, no
// conditions.
var (
	taskWorkWriter     = patch.Writer{Name: WorkControllerName + "/task"}
	dotWorkWriter      = patch.Writer{Name: WorkControllerName + "/dot"}
	approvalWorkWriter = patch.Writer{Name: WorkControllerName + "/approval"}
	computerWorkWriter = patch.Writer{Name: WorkControllerName + "/computer"}
)

// WorkReconciler is a Dot's work, keyed by Dot: it computes the statuses
// its event log gives (a Task's phase, summary, error, spend and progress;
// the Dot's agentState, currentTask, pendingApprovals and lastActivityTime;
// the Computer's nextAutomationTime), makes an Approval for each one the
// guest asked for, and takes the control plane's decisions about the Dot's
// work: which task goes next (one at a time), a cancel, a person's decision.
// Each decision is stored with its host events and outbox row in one
// transaction (store.Decide), idempotent by its row's id, so a control plane
// killed between two writes sends nothing twice.
type WorkReconciler struct {
	Client   client.Client
	Store    *store.Store
	Recorder recorder.EventRecorder
	Clock    clock.PassiveClock
	// Poll is how often the log is read for Dots with new events; 500 ms
	// when zero.
	Poll time.Duration

	mu    sync.Mutex
	views map[types.UID]*projection.View
}

// +kubebuilder:rbac:groups=dots.invisible.dev,resources=tasks;approvals,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups=dots.invisible.dev,resources=computers;dots,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=dots.invisible.dev,resources=tasks/status;approvals/status;dots/status;computers/status,verbs=get;update;patch

// SetupWithManager registers the reconciler: a Dot, its Tasks and
// Approvals, and new events in its log wake it.
func (r *WorkReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	r.views = map[types.UID]*projection.View{}
	for _, obj := range []client.Object{&dotsv1.Task{}, &dotsv1.Approval{}} {
		if err := mgr.GetFieldIndexer().IndexField(ctx, obj, DotNameField, func(o client.Object) []string {
			switch v := o.(type) {
			case *dotsv1.Task:
				return []string{v.Spec.DotName}
			case *dotsv1.Approval:
				return []string{v.Spec.DotName}
			}
			return nil
		}); err != nil {
			return err
		}
	}
	byDot := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		var dot string
		switch v := o.(type) {
		case *dotsv1.Task:
			dot = v.Spec.DotName
		case *dotsv1.Approval:
			dot = v.Spec.DotName
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: dot}}}
	})
	logged := make(chan event.TypedGenericEvent[*dotsv1.Dot], 1024)
	if err := mgr.Add(&logFollower{store: r.Store, poll: r.Poll, out: logged}); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&dotsv1.Dot{}).
		Owns(&dotsv1.Computer{}).
		Watches(&dotsv1.Task{}, byDot).
		Watches(&dotsv1.Approval{}, byDot).
		WatchesRawSource(source.Channel(logged, &handler.TypedEnqueueRequestForObject[*dotsv1.Dot]{})).
		Named(WorkControllerName).
		Complete(r)
}

// logFollower reads the log for Dots with new events and wakes their
// reconciles. It runs on the leader only (it feeds the leader's
// controller). It reads when the log's notification (store.EventsChannel)
// says events were stored, and every poll besides, for a notification the
// listening connection lost.
type logFollower struct {
	store *store.Store
	poll  time.Duration
	out   chan<- event.TypedGenericEvent[*dotsv1.Dot]
}

func (f *logFollower) Start(ctx context.Context) error {
	poll := f.poll
	if poll == 0 {
		poll = 5 * time.Second
	}
	// Everything before the start is read by the first reconcile of each
	// Dot, which the manager's start lists.
	after, err := f.store.LastEventID(ctx)
	if err != nil {
		return err
	}
	// A wake-up only (nothing kept): what was stored is read from the table.
	stored := f.store.NewChanges(store.EventsChannel, 0, ctrl.LoggerFrom(ctx).WithName("log-follower"))
	listened := make(chan struct{})
	go func() {
		defer close(listened)
		_ = stored.Run(ctx)
	}()
	defer func() { <-listened }()
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		// Taken before the read: a notification during the read wakes
		// the next one.
		_, _, _, changed := stored.Since(store.Cursor{})
		if dots, last, err := f.store.DotsWithEventsAfter(ctx, after, 5000); err == nil {
			after = last
			for _, d := range dots {
				dot := &dotsv1.Dot{ObjectMeta: metav1.ObjectMeta{Namespace: d.Namespace, Name: d.Name}}
				select {
				case f.out <- event.TypedGenericEvent[*dotsv1.Dot]{Object: dot}:
				case <-ctx.Done():
					return nil
				}
			}
		} // else the next wake-up or tick tries again
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-t.C:
		}
	}
}

// Reconcile folds the Dot's new events, takes its decisions, and writes the
// statuses the log gives.
func (r *WorkReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	dot := &dotsv1.Dot{}
	if err := r.Client.Get(ctx, req.NamespacedName, dot); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	if !dot.DeletionTimestamp.IsZero() {
		// Nothing more goes to a guest that is going; the log stays for
		// the Dot's history until its namespace goes.
		r.forget(dot.UID)
		return ctrl.Result{}, r.Store.DropUndelivered(ctx, string(dot.UID), "the Dot was deleted")
	}
	id := store.Dot{Namespace: dot.Namespace, Name: dot.Name, UID: string(dot.UID)}
	view, err := r.fold(ctx, id)
	if err != nil {
		return ctrl.Result{}, err
	}
	var tasks dotsv1.TaskList
	if err := r.Client.List(ctx, &tasks, client.InNamespace(dot.Namespace), client.MatchingFields{DotNameField: dot.Name}); err != nil {
		return ctrl.Result{}, err
	}
	var approvals dotsv1.ApprovalList
	if err := r.Client.List(ctx, &approvals, client.InNamespace(dot.Namespace), client.MatchingFields{DotNameField: dot.Name}); err != nil {
		return ctrl.Result{}, err
	}
	now := r.Clock.Now()

	// Decisions first, each folded into the view as it is stored.
	decide := func(row *store.Inbound, events ...store.Event) error {
		_, err := r.Store.Decide(ctx, row, events...)
		// Bring the view up to the log, the decision's own events with it.
		// Folding only what was stored would move the view past the events
		// other writers (the guest's pump) committed since the view was
		// read, and those would never be folded.
		if _, ferr := r.fold(ctx, id); ferr != nil && err == nil {
			err = ferr
		}
		return err
	}
	// Each step on its own: one that fails (a row the database refuses, a
	// conflict) is recorded and retried, and never keeps the Dot's other
	// steps (its statuses, approvals, wake and sleep) from being taken.
	steps := &workSteps{}
	steps.run("log the Dot's configuration", r.logDot(ctx, dot, id, view, decide))
	for i := range tasks.Items {
		steps.run("cancel task "+tasks.Items[i].Name, r.cancel(ctx, &tasks.Items[i], id, view, decide))
	}
	for i := range approvals.Items {
		steps.run("deliver the decision of approval "+approvals.Items[i].Name, r.answer(ctx, &approvals.Items[i], id, decide))
	}
	steps.run("record the MCP servers added", r.recordMCPAdditions(ctx, dot, id, view, approvals.Items, decide))
	d := lifecycle.NextTask(taskFacts(tasks.Items, view), now)
	if d.Next != "" {
		steps.run("dispatch task "+d.Next, r.dispatch(taskNamed(tasks.Items, d.Next), id, view, decide))
	}

	steps.run("give up a task its computer cannot start for", r.giveUpUnstartable(ctx, dot, id, view, tasks.Items))

	// Then the statuses the log gives.
	steps.run("make the approvals asked for", r.makeApprovals(ctx, dot, view, tasks.Items, approvals.Items))
	steps.run("write the statuses", r.writeStatuses(ctx, dot, view, tasks.Items))
	after, err := r.wakeOrSleep(ctx, dot, view, tasks.Items, d, now)
	steps.run("wake or sleep the computer", err)
	if d.Wait > 0 && (after == 0 || d.Wait < after) {
		after = d.Wait
	}
	return steps.result(ctx, r, dot, ctrl.Result{RequeueAfter: after})
}

// giveUpUnstartable fails the Dot's current task when its computer failed
// to start lifecycle.MaxTaskFailures times in a row (the crash-loop record)
// before the task reached the guest: a failed wake counts toward giving a
// task up (ref 9.2), so a Dot that cannot be made READY does not hold its
// queue for ever. The task's task.created row is dropped and task.failed
// logged in one transaction, naming the computer's reason; a row that was
// delivered meanwhile is left alone.
func (r *WorkReconciler) giveUpUnstartable(ctx context.Context, dot *dotsv1.Dot, id store.Dot, view *projection.View, tasks []dotsv1.Task) error {
	current := view.CurrentTask()
	if current == "" {
		return nil
	}
	c := &dotsv1.Computer{}
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(dot), c); err != nil {
		return client.IgnoreNotFound(err)
	}
	sf := c.Status.StartFailure
	if !metav1.IsControlledBy(c, dot) || sf == nil || int(sf.ConsecutiveFailCount) < lifecycle.MaxTaskFailures || c.Status.State == dotsv1.ComputerRunning {
		return nil
	}
	v := view.Tasks[current]
	reason := fmt.Sprintf("the Dot's computer failed to start %d times in a row", sf.ConsecutiveFailCount)
	if sf.Message != "" {
		reason += ": " + sf.Message
	}
	data, err := json.Marshal(wire.TaskFailed{TaskID: current, Run: v.Runs, Error: reason})
	if err != nil {
		return err
	}
	failed := store.Event{Dot: id, Type: wire.EventTaskFailed, Source: store.SourceHost, Data: data}
	gaveUp, err := r.Store.GiveUpTask(ctx, store.TaskCreatedID(current, v.Runs), reason, r.Clock.Now(), failed)
	if err != nil {
		return err
	}
	if gaveUp {
		for i := range tasks {
			if string(tasks[i].UID) == current {
				if r.Recorder != nil {
					r.Recorder.Eventf(&tasks[i], nil, corev1.EventTypeWarning, "GivenUp", "Fail", "%s", pgtext.String(truncate(reason, 512)))
				}
			}
		}
		_, err = r.fold(ctx, id)
	}
	return err
}

// taskRuns is a task's runs and times as its Task's status says them,
// to the second, the newest runs kept when there are more than the status
// holds.
func taskRuns(v *projection.TaskView) (runs []dotsv1.TaskRun, start, completion *metav1.Time) {
	at := func(t time.Time) *metav1.Time {
		if t.IsZero() {
			return nil
		}
		return &metav1.Time{Time: t.Truncate(time.Second)}
	}
	for _, r := range v.RunTimes {
		runs = append(runs, dotsv1.TaskRun{Number: int32(r.Number), Started: at(r.Started), Delivered: at(r.Delivered),
			Finished: at(r.Finished), Outcome: r.Outcome})
	}
	if len(runs) > maxTaskRuns {
		runs = runs[len(runs)-maxTaskRuns:]
	}
	return runs, at(v.RunTimes[0].Started), at(v.Ended)
}

// maxTaskRuns is the most runs a Task's status holds (its CRD's bound).
const maxTaskRuns = 64

// workSteps gathers the failures of one reconcile's steps.
type workSteps struct {
	failed    []error
	conflicts int
}

func (s *workSteps) run(name string, err error) {
	if err == nil {
		return
	}
	if apierrors.IsConflict(err) {
		// Another writer moved the object on: read it again soon.
		s.conflicts++
		return
	}
	s.failed = append(s.failed, fmt.Errorf("%s: %w", name, err))
}

// result is the reconcile's answer: res when every step was taken, a
// requeue after a conflict, the failures (retried with backoff) otherwise,
// each told on the Dot as a Warning Event (kept short: the log has the rest).
func (s *workSteps) result(ctx context.Context, r *WorkReconciler, dot *dotsv1.Dot, res ctrl.Result) (ctrl.Result, error) {
	if len(s.failed) == 0 {
		if s.conflicts > 0 {
			return ctrl.Result{RequeueAfter: patch.ConflictRetry}, nil
		}
		return res, nil
	}
	for _, err := range s.failed {
		log.FromContext(ctx).Error(err, "a step of the Dot's work failed; the other steps were taken", "dot", dot.Namespace+"/"+dot.Name)
		if r.Recorder != nil {
			r.Recorder.Eventf(dot, nil, corev1.EventTypeWarning, "WorkStepFailed", "Reconcile", "%s", pgtext.String(truncate(err.Error(), 512)))
		}
	}
	return ctrl.Result{}, errors.Join(s.failed...)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// wakeOrSleep applies the sleep and wake decision (ref 9.5) to the Dot's
// Computer, as a start or a sleep request its host agent acts on. It
// returns when to look again with nothing changed.
func (r *WorkReconciler) wakeOrSleep(ctx context.Context, dot *dotsv1.Dot, view *projection.View, tasks []dotsv1.Task, d lifecycle.Dispatch, now time.Time) (time.Duration, error) {
	c := &dotsv1.Computer{}
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(dot), c); err != nil {
		return 0, client.IgnoreNotFound(err)
	}
	if !metav1.IsControlledBy(c, dot) || !c.DeletionTimestamp.IsZero() {
		return 0, nil
	}
	undelivered, err := r.Store.Undelivered(ctx, string(dot.UID))
	if err != nil {
		return 0, err
	}
	f := lifecycle.Facts{
		Work: lifecycle.Work{
			DueTask:        d.Next != "" || (d.Blocked == "" && hasDue(tasks, view, now)),
			ActiveTask:     view.CurrentTask() != "",
			Undelivered:    undelivered,
			NextAutomation: view.NextAutomation,
		},
		Strategy:     c.Spec.RunStrategy,
		State:        c.Status.State,
		StopReason:   c.Status.StopReason,
		Phase:        dot.Status.Phase,
		AgentState:   string(view.AgentState),
		LastActivity: view.LastActivity,
		Now:          now,
	}
	if dot.Spec.Computer.IdleTimeout != nil {
		f.IdleTimeout = dot.Spec.Computer.IdleTimeout.Duration
	}
	// The wake lead is the host's (its host.yaml, reported on its Host).
	if host := (&dotsv1.Host{}); c.Spec.NodeName != "" && r.Client.Get(ctx, client.ObjectKey{Name: c.Spec.NodeName}, host) == nil && host.Status.WakeLead != nil {
		f.WakeLead = host.Status.WakeLead.Duration
	}
	if f.LastActivity.IsZero() {
		f.LastActivity = dot.CreationTimestamp.Time
	}
	decision := lifecycle.Decide(f)
	switch decision.Action {
	case lifecycle.Wake:
		if c.RequestPending(dotsv1.StartRequestedAnnotation, c.Status.HandledStartRequest) {
			return decision.After, nil
		}
		// The start a person asks for, by the same rule: a person's work
		// wakes a computer a person stopped, and from that start on it
		// sleeps and wakes like any other (ref 9.5).
		woken := c.DeepCopy()
		woken.RequestStart(now)
		if err := r.Client.Patch(ctx, woken, client.MergeFromWithOptions(c, client.MergeFromWithOptimisticLock{})); err != nil {
			return 0, err
		}
		r.Recorder.Eventf(dot, c, corev1.EventTypeNormal, "Waking", "Wake", "Computer %s is started: %s", c.Name, decision.Why)
	case lifecycle.Sleep:
		if c.RequestPending(dotsv1.SleepRequestedAnnotation, c.Status.HandledSleepRequest) {
			return decision.After, nil
		}
		asleep := c.DeepCopy()
		asleep.RequestSleep(now)
		if err := r.Client.Patch(ctx, asleep, client.MergeFromWithOptions(c, client.MergeFromWithOptimisticLock{})); err != nil {
			return 0, err
		}
		r.Recorder.Eventf(dot, c, corev1.EventTypeNormal, "Sleeping", "Sleep", "Computer %s goes to sleep: %s", c.Name, decision.Why)
	}
	return decision.After, nil
}

// hasDue: a PENDING task whose time has come, even one a blocked dispatch
// did not pick.
func hasDue(tasks []dotsv1.Task, view *projection.View, now time.Time) bool {
	return lifecycle.NextTask(taskFacts(tasks, view), now).Next != ""
}

// fold brings the Dot's view up to its log.
func (r *WorkReconciler) fold(ctx context.Context, id store.Dot) (*projection.View, error) {
	r.mu.Lock()
	view, ok := r.views[types.UID(id.UID)]
	if !ok {
		view = projection.NewView()
		r.views[types.UID(id.UID)] = view
	}
	r.mu.Unlock()
	for {
		events, err := r.Store.EventsAfter(ctx, id.UID, view.LastID, 1000)
		if err != nil {
			return nil, err
		}
		view.Fold(toProjection(events)...)
		if len(events) < 1000 {
			return view, nil
		}
	}
}

func (r *WorkReconciler) forget(uid types.UID) {
	r.mu.Lock()
	delete(r.views, uid)
	r.mu.Unlock()
}

func toProjection(events []store.Event) []projection.Event {
	out := make([]projection.Event, 0, len(events))
	for _, e := range events {
		out = append(out, projection.Event{ID: e.ID, Type: e.Type, Host: e.Source == store.SourceHost, Data: e.Data, At: e.CreatedAt})
	}
	return out
}

// taskFacts is what the dispatcher knows of the Dot's Tasks: their phase as
// the log tells it.
func taskFacts(tasks []dotsv1.Task, view *projection.View) []lifecycle.Task {
	out := make([]lifecycle.Task, 0, len(tasks))
	for _, t := range tasks {
		if !t.DeletionTimestamp.IsZero() {
			continue
		}
		f := lifecycle.Task{Name: t.Name, Phase: dotsv1.TaskPending, Priority: t.Spec.Priority, Created: t.CreationTimestamp.Time, CancelRequested: t.Spec.CancelRequested}
		if v, ok := view.Tasks[string(t.UID)]; ok {
			f.Phase = v.Phase
		}
		if t.Spec.ScheduledAt != nil {
			f.ScheduledAt = &t.Spec.ScheduledAt.Time
		}
		out = append(out, f)
	}
	return out
}

func taskNamed(tasks []dotsv1.Task, name string) *dotsv1.Task {
	for i := range tasks {
		if tasks[i].Name == name {
			return &tasks[i]
		}
	}
	return nil
}

type decideFunc func(row *store.Inbound, events ...store.Event) error

// dispatch gives the task to the Dot: a run opens (host task.created) and
// its task.created goes into the outbox, in one transaction.
func (r *WorkReconciler) dispatch(t *dotsv1.Task, id store.Dot, view *projection.View, decide decideFunc) error {
	run := 1
	if v, ok := view.Tasks[string(t.UID)]; ok {
		run = v.Runs + 1
	}
	uid := string(t.UID)
	body, err := json.Marshal(protocol.TaskCreated{TaskID: uid, Description: t.Spec.Description, Priority: int(t.Spec.Priority)})
	if err != nil {
		return err
	}
	logged, _ := json.Marshal(map[string]any{"task_id": uid, "task": t.Name, "run": run})
	err = decide(&store.Inbound{ID: store.TaskCreatedID(uid, run), Dot: id, Type: protocol.InboundTaskCreated, Data: body, TaskUID: uid, Run: run},
		store.Event{Dot: id, Type: wire.EventTaskCreated, Source: store.SourceHost, Data: logged})
	if err == nil {
		r.Recorder.Eventf(t, nil, corev1.EventTypeNormal, "Dispatched", "Dispatch", "given to Dot %s (run %d)", t.Spec.DotName, run)
	}
	return err
}

// cancel ends a task a person cancelled: one never given to the Dot, or
// whose task.created never left, is dropped; one the guest may hold is
// cancelled there with a system.event behind its task.created.
func (r *WorkReconciler) cancel(ctx context.Context, t *dotsv1.Task, id store.Dot, view *projection.View, decide decideFunc) error {
	if !t.Spec.CancelRequested {
		return nil
	}
	uid := string(t.UID)
	v, dispatched := view.Tasks[uid]
	if dispatched && v.Phase.Ended() {
		return nil
	}
	logged, _ := json.Marshal(map[string]any{"task_id": uid, "task": t.Name})
	ev := store.Event{Dot: id, Type: wire.EventTaskCancelled, Source: store.SourceHost, Data: logged}
	if !dispatched || v.Runs == 0 {
		return decide(nil, ev)
	}
	dropped, err := r.Store.DropUnsent(ctx, store.TaskCreatedID(uid, v.Runs), "cancelled before it was sent")
	if err != nil {
		return err
	}
	if dropped {
		return decide(nil, ev)
	}
	data, _ := json.Marshal(protocol.TaskCancelled{TaskID: uid})
	body, _ := json.Marshal(protocol.SystemEvent{Name: protocol.SystemEventTaskCancelled, Data: data})
	return decide(&store.Inbound{ID: "cancel-" + uid, Dot: id, Type: protocol.InboundSystemEvent, Data: body, TaskUID: uid, Run: v.Runs}, ev)
}

// logDot tells the log of a new generation of the Dot's spec and of a new
// state of its Computer, once each: the view, folded from the log, says
// what is already told.
func (r *WorkReconciler) logDot(ctx context.Context, dot *dotsv1.Dot, id store.Dot, view *projection.View, decide decideFunc) error {
	if dot.Generation > view.Generation {
		typ := wire.EventDotUpdated
		if view.Generation == 0 {
			typ = wire.EventDotCreated
		}
		data, _ := json.Marshal(map[string]any{"generation": dot.Generation})
		if err := decide(nil, store.Event{Dot: id, Type: typ, Source: store.SourceHost, Data: data}); err != nil {
			return err
		}
	}
	c := &dotsv1.Computer{}
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(dot), c); err != nil || !metav1.IsControlledBy(c, dot) {
		return client.IgnoreNotFound(err)
	}
	if state := string(c.Status.State); state != "" && state != view.ComputerState {
		data, _ := json.Marshal(map[string]any{"state": state, "stop_reason": c.Status.StopReason})
		return decide(nil, store.Event{Dot: id, Type: wire.EventComputerState, Source: store.SourceHost, Data: data})
	}
	return nil
}

// alwaysManager is the field manager of the permissions an "always allow"
// sets: a GitOps apply of another value then meets a conflict instead of
// silently taking it back.
const alwaysManager = "invisible-dots-always-allow"

// allowAlways sets the Approval's permission to allow in the Dot's spec,
// with its own field manager (server-side apply, forced: the person's
// decision wins over the value applied before it).
func (r *WorkReconciler) allowAlways(ctx context.Context, a *dotsv1.Approval) error {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": dotsv1.GroupVersion.String(),
		"kind":       "Dot",
		"metadata":   map[string]any{"name": a.Spec.DotName, "namespace": a.Namespace},
		"spec":       map[string]any{"permissions": map[string]any{a.Spec.Permission: "allow"}},
	}}
	if err := r.Client.Patch(ctx, u, client.Apply, client.FieldOwner(alwaysManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("set %s to allow in Dot %s: %w", a.Spec.Permission, a.Spec.DotName, err)
	}
	return nil
}

// answer delivers a person's decision on an Approval the guest asked for:
// approval.resolved in the log and approval.received in the outbox. An
// "always" approval first sets the permission to allow in the Dot's spec
// (the guest link pushes the new config), logged as dot.updated.
func (r *WorkReconciler) answer(ctx context.Context, a *dotsv1.Approval, id store.Dot, decide decideFunc) error {
	if a.Spec.Decision == "" || a.Spec.RequestID == "" {
		return nil
	}
	if a.Spec.Decision == dotsv1.Approve && a.Spec.Always && a.Spec.Permission != "" {
		if err := r.allowAlways(ctx, a); err != nil {
			return err
		}
	}
	msg := protocol.ApprovalReceived{ApprovalID: a.Spec.RequestID, Decision: protocol.ApprovalDecision(a.Spec.Decision)}
	if a.Spec.Note != "" {
		msg.Note = ptr.To(a.Spec.Note)
	}
	body, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	logged, _ := json.Marshal(map[string]any{"approval_id": a.Spec.RequestID, "approval": a.Name, "decision": a.Spec.Decision, "always": a.Spec.Always})
	return decide(&store.Inbound{ID: store.ApprovalDecisionID(string(a.UID)), Dot: id, Type: protocol.InboundApprovalReceived, Data: body},
		store.Event{Dot: id, Type: wire.EventApprovalResolved, Source: store.SourceHost, Data: logged})
}

// makeApprovals makes an Approval for each request of the log and writes
// its first phase at once: Pending, or Expired when its task ended before
// the Approval was made (a request read from the log after its task's end),
// so it is never seen waiting. It marks Expired those whose task ended
// later without a decision. The Approval reconciler leaves the first phase
// of a guest's request to this one.
func (r *WorkReconciler) makeApprovals(ctx context.Context, dot *dotsv1.Dot, view *projection.View, tasks []dotsv1.Task, have []dotsv1.Approval) error {
	byRequest := map[string]*dotsv1.Approval{}
	for i := range have {
		byRequest[have[i].Spec.RequestID] = &have[i]
	}
	taskName := map[string]string{}
	for _, t := range tasks {
		taskName[string(t.UID)] = t.Name
	}
	for _, reqID := range view.ApprovalOrder {
		av := view.Approvals[reqID]
		expired := view.Expired(av)
		a, ok := byRequest[reqID]
		if !ok {
			a = &dotsv1.Approval{
				ObjectMeta: metav1.ObjectMeta{Name: dotsv1.ApprovalName(dot.Name, reqID), Namespace: dot.Namespace, Labels: map[string]string{dotsv1.DotLabel: dot.Name}},
				Spec: dotsv1.ApprovalSpec{
					DotName: dot.Name, RequestID: reqID, Tool: av.Requested.Tool, Permission: av.Requested.Permission,
					Reason: av.Requested.Reason, Arguments: &apiextensionsv1.JSON{Raw: av.Requested.Arguments},
				},
			}
			if av.Requested.TaskID != nil {
				a.Spec.TaskName = taskName[*av.Requested.TaskID]
			}
			if err := controllerutil.SetControllerReference(dot, a, r.Client.Scheme()); err != nil {
				return err
			}
			if err := r.Client.Create(ctx, a); err != nil {
				if apierrors.IsAlreadyExists(err) {
					continue // made meanwhile: its phase is the next pass's
				}
				return fmt.Errorf("make the Approval of request %s: %w", reqID, err)
			}
			if expired {
				r.Recorder.Eventf(dot, a, corev1.EventTypeNormal, "ApprovalExpired", "Ask", "Dot %s asked to use %s (%s) for a task that had ended: Approval %s is Expired", dot.Name, av.Requested.Tool, av.Requested.Permission, a.Name)
			} else {
				r.Recorder.Eventf(dot, a, corev1.EventTypeNormal, "ApprovalRequested", "Ask", "Dot %s asks to use %s (%s): Approval %s", dot.Name, av.Requested.Tool, av.Requested.Permission, a.Name)
			}
		}
		phase, write := lifecycle.RequestedApprovalPhase(a.Status.Phase, a.Spec.Decision != "", expired)
		if !write {
			continue
		}
		helper := patch.NewHelper(r.Client, approvalWorkWriter, a)
		a.Status.Phase = phase
		if _, err := helper.Patch(ctx, a); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}

// writeStatuses writes what the log gives of the Dot, its Tasks and its
// Computer, each only when it changed.
func (r *WorkReconciler) writeStatuses(ctx context.Context, dot *dotsv1.Dot, view *projection.View, tasks []dotsv1.Task) error {
	names := map[string]string{}
	for i := range tasks {
		t := &tasks[i]
		names[string(t.UID)] = t.Name
		v, ok := view.Tasks[string(t.UID)]
		if !ok {
			continue // PENDING, as the Task reconciler wrote it
		}
		helper := patch.NewHelper(r.Client, taskWorkWriter, t)
		t.Status.Phase, t.Status.Summary, t.Status.Error = v.Phase, v.Summary, v.Error
		t.Status.Progress, t.Status.SpentUSD = v.Progress, protocol.RoundUSD(v.SpentUSD)
		if len(v.RunTimes) > 0 {
			t.Status.Runs, t.Status.StartTime, t.Status.CompletionTime = taskRuns(v)
		}
		if _, err := helper.Patch(ctx, t); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}

	helper := patch.NewHelper(r.Client, dotWorkWriter, dot)
	dot.Status.AgentState = string(view.AgentState)
	dot.Status.CurrentTask = names[view.CurrentTask()]
	dot.Status.PendingApprovals = int32(view.PendingApprovals())
	if !view.LastActivity.IsZero() {
		dot.Status.LastActivityTime = &metav1.Time{Time: view.LastActivity.Truncate(time.Second)}
	}
	if _, err := helper.Patch(ctx, dot); err != nil && !apierrors.IsNotFound(err) {
		return err
	}

	computer := &dotsv1.Computer{}
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(dot), computer); err != nil {
		return client.IgnoreNotFound(err)
	}
	if !metav1.IsControlledBy(computer, dot) {
		return nil
	}
	ch := patch.NewHelper(r.Client, computerWorkWriter, computer)
	computer.Status.NextAutomationTime = nil
	if view.NextAutomation != nil {
		computer.Status.NextAutomationTime = &metav1.Time{Time: *view.NextAutomation}
	}
	_, err := ch.Patch(ctx, computer)
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
