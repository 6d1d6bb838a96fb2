package controllers

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
	"sigs.k8s.io/controller-runtime/pkg/source"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/internal/lifecycle"
	"github.com/invisible-dots/invisible-dots/internal/lifecycle/projection"
	"github.com/invisible-dots/invisible-dots/internal/patch"
	"github.com/invisible-dots/invisible-dots/internal/pgtext"
	"github.com/invisible-dots/invisible-dots/internal/store"
)

// DotNameField indexes Approvals by spec.dotName, and Tasks on a cache that
// is not client-go's informer (WorkLog.IndexTasks).
const DotNameField = "spec.dotName"

// IndexDotName registers the spec.dotName index of Approvals on a manager's
// cache. Tasks have theirs from WorkLog.IndexTasks, read without copies.
func IndexDotName(ctx context.Context, mgr ctrl.Manager) error {
	return mgr.GetFieldIndexer().IndexField(ctx, &dotsv1.Approval{}, DotNameField, func(o client.Object) []string {
		if a, ok := o.(*dotsv1.Approval); ok {
			return []string{a.Spec.DotName}
		}
		return nil
	})
}

// WorkLog is the Dots' event logs as the controllers of a Dot's work read
// them (dispatch, approval requests, MCP additions, activity status,
// power): one view a Dot (projection.View), folded from its log once and
// then kept up to it by reading only the events after the last folded, and
// shared by those controllers, so the log is read once however many of them
// look at it.
//
// The log's follower (Start) reads which Dots have new events and wakes
// every controller of the work for them; a view is read from the log again
// only when the follower told of events it has not folded, or when a
// controller stored a decision. A controller holds the Dot's view while it
// reads and decides (Open .. Close), so the controllers of one Dot take
// their turns, each seeing the decisions of the one before.
type WorkLog struct {
	Store *store.Store
	// Poll is how often the log is read for Dots with new events besides
	// the log's notifications; 5 s when zero.
	Poll time.Duration

	// eventsAfter reads a Dot's log after an id: Store.EventsAfter when
	// nil. Used for testing purposes.
	eventsAfter func(ctx context.Context, dotUID string, afterID int64, limit int) ([]store.Event, error)

	// tasks is the cache's Task index (IndexTasks), nil without one.
	tasks toolscache.Indexer

	mu    sync.Mutex
	dots  map[types.UID]*dotLog
	wakes []chan event.TypedGenericEvent[*dotsv1.Dot]
}

// What the controllers of a Dot's work read and write, together.
// +kubebuilder:rbac:groups=dots.invisible.dev,resources=tasks;approvals,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups=dots.invisible.dev,resources=computers;dots,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=dots.invisible.dev,resources=tasks/status;approvals/status;dots/status;computers/status,verbs=get;update;patch

// dotLog is one Dot's view. told counts the follower's news of events
// stored in its log, folded the news the view was last brought up to.
type dotLog struct {
	mu     sync.Mutex
	view   *projection.View
	told   uint64
	folded uint64
}

// DotWork is one controller's turn with a Dot's view: taken by Open, given
// back by Close.
type DotWork struct {
	log *WorkLog
	d   *dotLog
	id  store.Dot
}

// Open takes the Dot's view, brought up to its log, for the caller's turn;
// Close gives it back.
func (l *WorkLog) Open(ctx context.Context, id store.Dot) (*DotWork, error) {
	l.mu.Lock()
	if l.dots == nil {
		l.dots = map[types.UID]*dotLog{}
	}
	d, ok := l.dots[types.UID(id.UID)]
	if !ok {
		// Everything stored before is news to a view not yet folded.
		d = &dotLog{view: projection.NewView(), told: 1}
		l.dots[types.UID(id.UID)] = d
	}
	told := d.told
	l.mu.Unlock()
	d.mu.Lock()
	w := &DotWork{log: l, d: d, id: id}
	if d.folded != told {
		if err := w.Fold(ctx); err != nil {
			d.mu.Unlock()
			return nil, err
		}
		d.folded = told
	}
	return w, nil
}

// Close gives the view back.
func (w *DotWork) Close() { w.d.mu.Unlock() }

// View is the Dot's statuses as its log tells them.
func (w *DotWork) View() *projection.View { return w.d.view }

// Fold brings the view up to the log.
func (w *DotWork) Fold(ctx context.Context) error {
	view := w.d.view
	for {
		read := w.log.eventsAfter
		if read == nil {
			read = w.log.Store.EventsAfter
		}
		events, err := read(ctx, w.id.UID, view.LastID, 1000)
		if err != nil {
			return err
		}
		view.Fold(toProjection(events)...)
		if len(events) < 1000 {
			return nil
		}
	}
}

// Decide stores a decision with its host events and outbox row in one
// transaction (store.Decide), idempotent by the row's id, and folds it into
// the view.
func (w *DotWork) Decide(ctx context.Context, row *store.Inbound, events ...store.Event) error {
	_, err := w.log.Store.Decide(ctx, row, events...)
	// Bring the view up to the log, the decision's own events with it.
	// Folding only what was stored would move the view past the events
	// other writers (the guest's pump) committed since the view was read,
	// and those would never be folded.
	if ferr := w.Fold(ctx); ferr != nil && err == nil {
		err = ferr
	}
	return err
}

// Forget drops a Dot's view: nothing more is decided for a Dot that is
// going.
func (l *WorkLog) Forget(uid types.UID) {
	l.mu.Lock()
	delete(l.dots, uid)
	l.mu.Unlock()
}

// tell records that the Dot's log has events its view may lack.
func (l *WorkLog) tell(uid types.UID) {
	l.mu.Lock()
	if d, ok := l.dots[uid]; ok {
		d.told++
	}
	l.mu.Unlock()
}

// Wake tells every controller of the Dot's work to look at it again, as the
// follower does for new events: for a decision stored without an event of
// the log (an outbox row alone), which another controller acts on (power
// wakes the computer for an undelivered row).
func (l *WorkLog) Wake(ctx context.Context, namespace, name string) {
	l.mu.Lock()
	wakes := l.wakes
	l.mu.Unlock()
	dot := &dotsv1.Dot{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	for _, out := range wakes {
		select {
		case out <- event.TypedGenericEvent[*dotsv1.Dot]{Object: dot}:
		case <-ctx.Done():
			return
		}
	}
}

// source is a controller's wake-ups from the log's follower: one channel a
// controller, each told of every Dot with new events. Taken before the
// manager starts.
func (l *WorkLog) source() source.Source {
	return l.sourceWith(&handler.TypedEnqueueRequestForObject[*dotsv1.Dot]{})
}

// sourceWith is source with the requests h makes of each Dot woken.
func (l *WorkLog) sourceWith(h handler.TypedEventHandler[*dotsv1.Dot, reconcile.Request]) source.Source {
	ch := make(chan event.TypedGenericEvent[*dotsv1.Dot], 1024)
	l.mu.Lock()
	l.wakes = append(l.wakes, ch)
	l.mu.Unlock()
	return source.Channel(ch, h)
}

// Start follows the log: it reads the Dots with new events and wakes the
// reconciles of their work. It runs on the leader only (it feeds the
// leader's controllers). It reads when the log's notification
// (store.EventsChannel) says events were stored, and every poll besides,
// for a notification the listening connection lost.
func (l *WorkLog) Start(ctx context.Context) error {
	poll := l.Poll
	if poll == 0 {
		poll = 5 * time.Second
	}
	l.mu.Lock()
	wakes := l.wakes
	l.mu.Unlock()
	// Everything before the start is read by the first reconcile of each
	// Dot, which the manager's start lists.
	after, err := l.Store.LastEventID(ctx)
	if err != nil {
		return err
	}
	// A wake-up only (nothing kept; the Store's one listener, shared):
	// what was stored is read from the table.
	stored := l.Store.Wakeups(store.EventsChannel, ctrl.LoggerFrom(ctx).WithName("log-follower"))
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
		if dots, last, err := l.Store.DotsWithEventsAfter(ctx, after, 5000); err == nil {
			after = last
			for _, d := range dots {
				l.tell(types.UID(d.UID))
				dot := &dotsv1.Dot{ObjectMeta: metav1.ObjectMeta{Namespace: d.Namespace, Name: d.Name}}
				for _, out := range wakes {
					select {
					case out <- event.TypedGenericEvent[*dotsv1.Dot]{Object: dot}:
					case <-ctx.Done():
						return nil
					}
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

func toProjection(events []store.Event) []projection.Event {
	out := make([]projection.Event, 0, len(events))
	for _, e := range events {
		out = append(out, projection.Event{ID: e.ID, Type: e.Type, Host: e.Source == store.SourceHost, Data: e.Data, At: e.CreatedAt})
	}
	return out
}

// workWatch is what wakes a controller of a Dot's work besides its Dot and
// the log's follower.
type workWatch struct {
	computers, tasks, approvals bool
	// quotas: a change to the namespace's DotQuota (a slot given back, a
	// cap raised) wakes every Dot of the namespace.
	quotas bool
}

// setUpWork registers a controller of a Dot's work, keyed by Dot: the Dot,
// new events in its log, and what w names wake it.
func setUpWork(mgr ctrl.Manager, l *WorkLog, name string, w workWatch, r reconcile.Reconciler) error {
	byDot := func(_ context.Context, o client.Object) []reconcile.Request {
		var dot string
		switch v := o.(type) {
		case *dotsv1.Task:
			dot = v.Spec.DotName
		case *dotsv1.Approval:
			dot = v.Spec.DotName
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: dot}}}
	}
	b := ctrl.NewControllerManagedBy(mgr).For(&dotsv1.Dot{})
	if w.computers {
		b = b.Owns(&dotsv1.Computer{})
	}
	if w.tasks {
		// A Dot's Tasks can come by the hundred: their events are batched.
		b = b.Watches(&dotsv1.Task{}, batched(taskBatch, byDot))
	}
	if w.approvals {
		// An Approval is a person's answer, awaited: at once.
		b = b.Watches(&dotsv1.Approval{}, handler.EnqueueRequestsFromMapFunc(byDot))
	}
	if w.quotas {
		c := mgr.GetClient()
		b = b.Watches(&dotsv1.DotQuota{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			var dots dotsv1.DotList
			if err := c.List(ctx, &dots, client.InNamespace(o.GetNamespace())); err != nil {
				return nil
			}
			reqs := make([]reconcile.Request, 0, len(dots.Items))
			for _, d := range dots.Items {
				reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: d.Namespace, Name: d.Name}})
			}
			return reqs
		}))
	}
	return b.WatchesRawSource(l.source()).Named(name).Complete(r)
}

// workDot reads the Dot a controller of its work reconciles: nil when it is
// gone or going (its view is then forgotten: nothing more is decided or
// written for it).
func workDot(ctx context.Context, c client.Client, l *WorkLog, req ctrl.Request) (*dotsv1.Dot, error) {
	dot := &dotsv1.Dot{}
	if err := c.Get(ctx, req.NamespacedName, dot); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	if !dot.DeletionTimestamp.IsZero() {
		l.Forget(dot.UID)
		return nil, nil
	}
	return dot, nil
}

// workInput is what a controller of a Dot's work decides from: the Dot, the
// Tasks and Approvals it asked for, and the Dot's log's view, held until
// Close.
type workInput struct {
	Dot *dotsv1.Dot
	// Tasks are the cache's own (dotTasks): DeepCopy one to change it.
	Tasks     []*dotsv1.Task
	Approvals []dotsv1.Approval
	*DotWork
}

// openWork reads a workInput: nil when the Dot is gone or going (workDot).
func openWork(ctx context.Context, c client.Client, l *WorkLog, req ctrl.Request, tasks, approvals bool) (*workInput, error) {
	dot, err := workDot(ctx, c, l, req)
	if dot == nil || err != nil {
		return nil, err
	}
	in := &workInput{Dot: dot}
	if tasks {
		if in.Tasks, err = l.dotTasks(ctx, c, dot); err != nil {
			return nil, err
		}
	}
	if approvals {
		if in.Approvals, err = dotApprovals(ctx, c, dot); err != nil {
			return nil, err
		}
	}
	if in.DotWork, err = l.Open(ctx, storeDot(dot)); err != nil {
		return nil, err
	}
	return in, nil
}

func storeDot(dot *dotsv1.Dot) store.Dot {
	return store.Dot{Namespace: dot.Namespace, Name: dot.Name, UID: string(dot.UID)}
}

// taskDotIndex indexes the cache's Tasks by namespace and spec.dotName
// ("<namespace>/<dotName>"), for WorkLog.dotTasks; taskRequesterIndex by
// namespace and the Dot their dotsv1.RequestedByLabel names (the label, as
// the selector it replaces read, not spec.requestedBy.dot), for
// WorkLog.requestedBy.
const (
	taskDotIndex       = "invisible-dots/task-dot"
	taskRequesterIndex = "invisible-dots/task-requester"
)

// IndexTasks indexes Tasks by their Dot, once: on client-go's informer,
// which dotTasks reads straight from; on any other cache, as the client's
// field index DotNameField, which dotTasks lists through, copied.
func (l *WorkLog) IndexTasks(ctx context.Context, mgr ctrl.Manager) error {
	inf, err := mgr.GetCache().GetInformer(ctx, &dotsv1.Task{})
	if err != nil {
		return err
	}
	shared, ok := inf.(toolscache.SharedIndexInformer)
	if !ok {
		return mgr.GetFieldIndexer().IndexField(ctx, &dotsv1.Task{}, DotNameField, func(o client.Object) []string {
			if t, ok := o.(*dotsv1.Task); ok {
				return []string{t.Spec.DotName}
			}
			return nil
		})
	}
	if err := inf.AddIndexers(toolscache.Indexers{
		taskDotIndex: func(obj any) ([]string, error) {
			if t, ok := obj.(*dotsv1.Task); ok {
				return []string{t.Namespace + "/" + t.Spec.DotName}, nil
			}
			return nil, nil
		},
		taskRequesterIndex: func(obj any) ([]string, error) {
			if t, ok := obj.(*dotsv1.Task); ok && t.Labels[dotsv1.RequestedByLabel] != "" {
				return []string{t.Namespace + "/" + t.Labels[dotsv1.RequestedByLabel]}, nil
			}
			return nil, nil
		},
	}); err != nil {
		return err
	}
	l.tasks = shared.GetIndexer()
	return nil
}

// dotTasks are the Dot's Tasks, in no order.
//
// They are the cache's own objects, not copies: a Dot that took thousands
// of tasks (a busy webhook's) had all of them copied by five reconcilers at
// each event of its log, first deep (a third of the server's time), then
// by value into a list (a sixth, and the garbage collector's work on it).
// Read them freely; to change or write one, write a DeepCopy of it (the
// client decodes its answer into the object it writes).
func (l *WorkLog) dotTasks(ctx context.Context, c client.Client, dot *dotsv1.Dot) ([]*dotsv1.Task, error) {
	if l.tasks != nil {
		objs, err := l.tasks.ByIndex(taskDotIndex, dot.Namespace+"/"+dot.Name)
		if err != nil {
			return nil, err
		}
		out := make([]*dotsv1.Task, 0, len(objs))
		for _, o := range objs {
			if t, ok := o.(*dotsv1.Task); ok {
				out = append(out, t)
			}
		}
		return out, nil
	}
	var list dotsv1.TaskList
	if err := c.List(ctx, &list, client.InNamespace(dot.Namespace), client.MatchingFields{DotNameField: dot.Name}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	out := make([]*dotsv1.Task, len(list.Items))
	for i := range list.Items {
		out[i] = &list.Items[i]
	}
	return out, nil
}

// requestedBy are the Tasks labelled as asked for by the Dot
// (dotsv1.RequestedByLabel), as copies the caller may change. From the
// cache's index when there is one: a label selector is a scan of every Task
// of the namespace, at every reconcile of every Dot that delegates.
func (l *WorkLog) requestedBy(ctx context.Context, c client.Client, asker *dotsv1.Dot) ([]dotsv1.Task, error) {
	if l.tasks != nil {
		objs, err := l.tasks.ByIndex(taskRequesterIndex, asker.Namespace+"/"+asker.Name)
		if err != nil {
			return nil, err
		}
		out := make([]dotsv1.Task, 0, len(objs))
		for _, o := range objs {
			if t, ok := o.(*dotsv1.Task); ok {
				out = append(out, *t.DeepCopy())
			}
		}
		return out, nil
	}
	var list dotsv1.TaskList
	err := c.List(ctx, &list, client.InNamespace(asker.Namespace), client.MatchingLabels{dotsv1.RequestedByLabel: asker.Name})
	return list.Items, err
}

func dotApprovals(ctx context.Context, c client.Client, dot *dotsv1.Dot) ([]dotsv1.Approval, error) {
	var approvals dotsv1.ApprovalList
	err := c.List(ctx, &approvals, client.InNamespace(dot.Namespace), client.MatchingFields{DotNameField: dot.Name})
	return approvals.Items, err
}

// dotComputer is the Dot's own Computer, nil when it has none (yet).
func dotComputer(ctx context.Context, c client.Client, dot *dotsv1.Dot) (*dotsv1.Computer, error) {
	computer := &dotsv1.Computer{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(dot), computer); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	if !metav1.IsControlledBy(computer, dot) {
		return nil, nil
	}
	return computer, nil
}

// taskFacts is what the dispatcher knows of the Dot's Tasks: their phase as
// the log tells it.
func taskFacts(tasks []*dotsv1.Task, view *projection.View) []lifecycle.Task {
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

// workSteps gathers the failures of one reconcile's steps: each step is
// taken on its own, so one that fails (a row the database refuses, a
// conflict) is recorded and retried, and never keeps the Dot's other steps
// from being taken.
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
func (s *workSteps) result(ctx context.Context, rec recorder.EventRecorder, dot *dotsv1.Dot, res ctrl.Result) (ctrl.Result, error) {
	if len(s.failed) == 0 {
		if s.conflicts > 0 {
			return ctrl.Result{RequeueAfter: patch.ConflictRetry}, nil
		}
		return res, nil
	}
	for _, err := range s.failed {
		log.FromContext(ctx).Error(err, "a step of the Dot's work failed; the other steps were taken", "dot", dot.Namespace+"/"+dot.Name)
		if rec != nil {
			rec.Eventf(dot, nil, corev1.EventTypeWarning, "WorkStepFailed", "Reconcile", "%s", pgtext.String(truncate(err.Error(), 512)))
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
