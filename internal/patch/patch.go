// Package patch is the one way a reconciler writes an object's status.
//
// Three rules, after cluster-api's util/patch:
//   - nothing is written when the status did not change, so a steady state
//     costs no write and no watch event;
//   - the status is written only over the resourceVersion it was computed
//     from (a merge patch with an optimistic lock): a reconcile that read a
//     stale cache loses with a Conflict and computes again from the newer
//     object, instead of writing old facts over new ones;
//   - each writer owns some condition types. Conditions it does not own are
//     put back as they were read before the write, so a writer cannot undo
//     another's condition even by mistake; with the lock, a condition another
//     writer set meanwhile is never overwritten either.
//
// Because the lock makes a concurrent write fail rather than merge, a
// Conflict is normal: RequeueOnConflict turns it into a quick requeue.
//
// A writer that owns no conditions and computes its fields from outside the
// object (a Dot's log) may write without the lock (Writer.NoLock): a stale
// read cannot make it write old facts, and its merge patch carries only the
// fields it changed. Two status writers of a new Dot, both woken by the same
// events, lost about three writes a Dot to each other under the lock.
package patch

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Object is a kind with a status subresource and conditions.
type Object interface {
	client.Object
	GetConditions() []metav1.Condition
	SetConditions([]metav1.Condition)
}

// Writer is one controller's right to write status: the condition types it
// owns. Two writers of one kind own disjoint types, except where a writer
// outside the object's host stands in for it (the host lifecycle marking a
// Computer's Ready Unknown) and both list the type.
type Writer struct {
	// Name is the controller's name, for errors.
	Name string
	// Conditions are the condition types this writer may set or remove.
	Conditions []string
	// NoLock writes without the resourceVersion lock. Only for a writer
	// that owns no conditions (a conditions list goes whole in a merge
	// patch) and that alone writes its fields, computed from outside the
	// object.
	NoLock bool
}

// Helper remembers an object as it was read and writes its status later.
type Helper struct {
	client client.Client
	writer Writer
	before Object
}

// NewHelper snapshots obj (as read from the API server or the cache) for a
// later Patch. Call it before changing obj.
func NewHelper(c client.Client, w Writer, obj Object) *Helper {
	return &Helper{client: c, writer: w, before: obj.DeepCopyObject().(Object)}
}

// Before is the object as it was read.
func (h *Helper) Before() Object { return h.before }

// Changed reports whether obj's status differs from the snapshot's, after
// restoring the conditions the writer does not own.
func (h *Helper) Changed(obj Object) bool {
	h.keepOthersConditions(obj)
	// Most looks change nothing, so the typed statuses are compared first,
	// strictly: identical ones are written identically, and this costs a
	// small part of converting both (which was most of a steady-state
	// reconcile). The converted form decides the rest: it is what a write
	// would carry, and it equates what a write cannot tell apart (times
	// within a second, a clock's monotonic reading).
	if a, b := typedStatus(h.before), typedStatus(obj); a.IsValid() && b.IsValid() &&
		reflect.DeepEqual(a.Interface(), b.Interface()) {
		return false
	}
	return !equality.Semantic.DeepEqual(status(h.before), status(obj))
}

// Patch writes obj's status when it changed since NewHelper, over the
// snapshot's resourceVersion. It reports whether it wrote. A Conflict means
// the object changed since it was read: compute again (RequeueOnConflict).
// A NotFound is returned as is: the object is gone.
func (h *Helper) Patch(ctx context.Context, obj Object) (bool, error) {
	if !h.Changed(obj) {
		return false, nil
	}
	opts := []client.MergeFromOption{client.MergeFromWithOptimisticLock{}}
	if h.writer.NoLock {
		if len(h.writer.Conditions) > 0 {
			return false, fmt.Errorf("%s: a writer that owns conditions writes under the lock", h.writer.Name)
		}
		opts = nil
	}
	err := h.client.Status().Patch(ctx, obj, client.MergeFromWithOptions(h.before, opts...))
	if err != nil {
		return false, fmt.Errorf("%s: write the status of %s: %w", h.writer.Name, client.ObjectKeyFromObject(obj), err)
	}
	// A second Patch from the same snapshot would conflict with this one.
	h.before = obj.DeepCopyObject().(Object)
	return true, nil
}

// keepOthersConditions puts back, as read, every condition obj's writer does
// not own, and drops those it added.
func (h *Helper) keepOthersConditions(obj Object) {
	owned := func(c metav1.Condition) bool { return slices.Contains(h.writer.Conditions, c.Type) }
	others := func(c metav1.Condition) bool { return !owned(c) }
	before := h.before.GetConditions()
	// The order as read, so a write is not made of a reordering alone.
	order := func(t string) int {
		for i, c := range before {
			if c.Type == t {
				return i
			}
		}
		return len(before)
	}
	byOrder := func(a, b metav1.Condition) int { return order(a.Type) - order(b.Type) }
	// Usually there is nothing to put back: obj holds its writer's
	// conditions alone, in the order read, and the snapshot none of
	// another's.
	if !slices.ContainsFunc(before, others) && !slices.ContainsFunc(obj.GetConditions(), others) &&
		slices.IsSortedFunc(obj.GetConditions(), byOrder) {
		return
	}
	var out []metav1.Condition
	for _, c := range obj.GetConditions() {
		if owned(c) {
			out = append(out, c)
		}
	}
	for _, c := range before {
		if !owned(c) {
			out = append(out, c)
		}
	}
	slices.SortStableFunc(out, byOrder)
	obj.SetConditions(out)
}

// typedStatus is a pointer to the object's Status field, or the zero Value
// when the object has none.
func typedStatus(obj Object) reflect.Value {
	v := reflect.ValueOf(obj)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return reflect.Value{}
	}
	f := v.Elem().FieldByName("Status")
	if !f.IsValid() || !f.CanAddr() {
		return reflect.Value{}
	}
	return f.Addr()
}

// status is the object's status field, for comparison.
func status(obj Object) any {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		// Every kind here converts; compare the whole object if not.
		return obj
	}
	return u["status"]
}

// ConflictRetry is how soon a status write that lost a Conflict is
// computed again: at once, from the newer object, once the cache has it.
const ConflictRetry = 100 * time.Millisecond

// RequeueOnConflict turns a Conflict from Patch into a quick requeue, so a
// lost race is not logged as an error.
func RequeueOnConflict(res ctrl.Result, err error) (ctrl.Result, error) {
	if apierrors.IsConflict(err) {
		return ctrl.Result{RequeueAfter: ConflictRetry}, nil
	}
	return res, err
}

// SetCondition sets one condition with the object's generation. Its
// LastTransitionTime changes only when the status does.
func SetCondition(obj Object, now time.Time, typ string, status metav1.ConditionStatus, reason, message string) {
	conds := obj.GetConditions()
	meta.SetStatusCondition(&conds, metav1.Condition{
		Type:               typ,
		Status:             status,
		Reason:             reason,
		Message:            message,
		ObservedGeneration: obj.GetGeneration(),
		LastTransitionTime: metav1.NewTime(now),
	})
	obj.SetConditions(conds)
}
