package patch_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	clientfake "sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/internal/patch"
)

var now = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

var (
	computers = patch.Writer{Name: "dot-controller", Conditions: []string{"Ready", "ComputerReady"}}
	guestLink = patch.Writer{Name: "guest-link", Conditions: []string{"ConfigApplied"}}
)

func newClient(t *testing.T, patches *int) client.Client {
	t.Helper()
	s := runtime.NewScheme()
	if err := dotsv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	dot := &dotsv1.Dot{ObjectMeta: metav1.ObjectMeta{Name: "d", Namespace: "default", Generation: 1}}
	return clientfake.NewClientBuilder().WithScheme(s).WithStatusSubresource(&dotsv1.Dot{}).WithObjects(dot).
		WithInterceptorFuncs(interceptor.Funcs{SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			*patches++
			return c.SubResource(sub).Patch(ctx, obj, p, opts...)
		}}).Build()
}

func get(t *testing.T, c client.Client) *dotsv1.Dot {
	t.Helper()
	d := &dotsv1.Dot{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: "d"}, d); err != nil {
		t.Fatal(err)
	}
	return d
}

func types(conds []metav1.Condition) map[string]metav1.ConditionStatus {
	out := map[string]metav1.ConditionStatus{}
	for _, c := range conds {
		out[c.Type] = c.Status
	}
	return out
}

// TestTwoWritersNeverUndoEachOther: each writer's conditions survive the
// other's writes, whether the other read before or after them.
func TestTwoWritersNeverUndoEachOther(t *testing.T) {
	ctx := context.Background()
	var patches int
	c := newClient(t, &patches)

	// Both read the same version.
	a, b := get(t, c), get(t, c)
	ha, hb := patch.NewHelper(c, computers, a), patch.NewHelper(c, guestLink, b)
	patch.SetCondition(a, now, "Ready", metav1.ConditionTrue, "Ready", "up")
	patch.SetCondition(b, now, "ConfigApplied", metav1.ConditionTrue, "Applied", "generation 1")

	if _, err := ha.Patch(ctx, a); err != nil {
		t.Fatal(err)
	}
	// b computed from the version before a's write: it loses, and does not
	// write its stale copy of the list over a's condition.
	if _, err := hb.Patch(ctx, b); !apierrors.IsConflict(err) {
		t.Fatalf("stale writer: err %v; want a Conflict", err)
	}
	if got := types(get(t, c).Status.Conditions); !cmp.Equal(got, map[string]metav1.ConditionStatus{"Ready": "True"}) {
		t.Fatalf("after the lost race: %v; want Ready only", got)
	}
	// Computed again from the newer version, it writes.
	b = get(t, c)
	hb = patch.NewHelper(c, guestLink, b)
	patch.SetCondition(b, now, "ConfigApplied", metav1.ConditionTrue, "Applied", "generation 1")
	if _, err := hb.Patch(ctx, b); err != nil {
		t.Fatal(err)
	}
	want := map[string]metav1.ConditionStatus{"Ready": "True", "ConfigApplied": "True"}
	if diff := cmp.Diff(want, types(get(t, c).Status.Conditions)); diff != "" {
		t.Fatalf("both writers: -want +got\n%s", diff)
	}

	// A writer that touches a condition it does not own changes nothing.
	a = get(t, c)
	ha = patch.NewHelper(c, computers, a)
	meta.RemoveStatusCondition(&a.Status.Conditions, "ConfigApplied")
	patch.SetCondition(a, now, "Ready", metav1.ConditionFalse, "NotReady", "down")
	if _, err := ha.Patch(ctx, a); err != nil {
		t.Fatal(err)
	}
	want = map[string]metav1.ConditionStatus{"Ready": "False", "ConfigApplied": "True"}
	if diff := cmp.Diff(want, types(get(t, c).Status.Conditions)); diff != "" {
		t.Errorf("a writer removing another's condition: -want +got\n%s", diff)
	}
}

// TestNothingWrittenWhenNothingChanged: the steady state costs no write.
func TestNothingWrittenWhenNothingChanged(t *testing.T) {
	ctx := context.Background()
	var patches int
	c := newClient(t, &patches)
	d := get(t, c)
	h := patch.NewHelper(c, computers, d)
	patch.SetCondition(d, now, "Ready", metav1.ConditionTrue, "Ready", "up")
	d.Status.Phase = dotsv1.DotReady
	if written, err := h.Patch(ctx, d); err != nil || !written {
		t.Fatalf("first write: written %v, err %v", written, err)
	}
	for i := range 3 {
		d = get(t, c)
		h = patch.NewHelper(c, computers, d)
		// The same facts an hour later: the transition time is kept.
		patch.SetCondition(d, now.Add(time.Hour), "Ready", metav1.ConditionTrue, "Ready", "up")
		d.Status.Phase = dotsv1.DotReady
		if written, err := h.Patch(ctx, d); err != nil || written {
			t.Fatalf("look %d: written %v, err %v; want nothing written", i, written, err)
		}
	}
	if patches != 1 {
		t.Errorf("%d status patches; want 1", patches)
	}
}

// TestEnsureFinalizerOnAnObjectDeletedMeanwhile: the cache still showed the
// object, the server no longer has it: a patch was tried, and there is no
// error to retry.
func TestEnsureFinalizerOnAnObjectDeletedMeanwhile(t *testing.T) {
	var patches int
	c := newClient(t, &patches)
	d := get(t, c)
	if err := c.Delete(context.Background(), d.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	added, err := patch.EnsureFinalizer(context.Background(), c, d, "dots.invisible.dev/test")
	if !added || err != nil {
		t.Errorf("EnsureFinalizer() on a deleted object = %v, %v; want true, nil", added, err)
	}
	// Any other error still reaches the caller.
	failing := interceptor.NewClient(c.(client.WithWatch), interceptor.Funcs{Patch: func(context.Context, client.WithWatch, client.Object, client.Patch, ...client.PatchOption) error {
		return apierrors.NewConflict(dotsv1.GroupVersion.WithResource("dots").GroupResource(), "d", nil)
	}})
	fresh := &dotsv1.Dot{ObjectMeta: metav1.ObjectMeta{Name: "d", Namespace: "default"}}
	if _, err := patch.EnsureFinalizer(context.Background(), failing, fresh, "dots.invisible.dev/test"); !apierrors.IsConflict(err) {
		t.Errorf("EnsureFinalizer() with a conflict = %v; want the conflict", err)
	}
}

// TestAWriterWithoutTheLockWinsAndUndoesNothing: a writer of fields from
// elsewhere that read before another's write still writes, and neither
// undoes the other's condition nor its own fields.
func TestAWriterWithoutTheLockWinsAndUndoesNothing(t *testing.T) {
	ctx := context.Background()
	var patches int
	c := newClient(t, &patches)
	activity := patch.Writer{Name: "activity", NoLock: true}

	a, b := get(t, c), get(t, c)
	ha, hb := patch.NewHelper(c, computers, a), patch.NewHelper(c, activity, b)
	patch.SetCondition(a, now, "Ready", metav1.ConditionTrue, "Ready", "up")
	b.Status.AgentState = "IDLE"
	if _, err := ha.Patch(ctx, a); err != nil {
		t.Fatal(err)
	}
	if _, err := hb.Patch(ctx, b); err != nil {
		t.Fatalf("writer without the lock, read before the other's write: %v; want it written", err)
	}
	got := get(t, c)
	if got.Status.AgentState != "IDLE" || !cmp.Equal(types(got.Status.Conditions), map[string]metav1.ConditionStatus{"Ready": "True"}) {
		t.Errorf("status %+v; want agentState IDLE and Ready kept", got.Status)
	}

	owning := patch.Writer{Name: "wrong", Conditions: []string{"Ready"}, NoLock: true}
	d := get(t, c)
	h := patch.NewHelper(c, owning, d)
	patch.SetCondition(d, now, "Ready", metav1.ConditionFalse, "Down", "down")
	if _, err := h.Patch(ctx, d); err == nil {
		t.Error("a writer owning conditions wrote without the lock; want it refused")
	}
}

// TestChanged: a status is written when what a write carries differs, and
// only then, whichever comparison decides.
func TestChanged(t *testing.T) {
	read := func() *dotsv1.Dot {
		d := &dotsv1.Dot{ObjectMeta: metav1.ObjectMeta{Name: "d", Namespace: "default", Generation: 1}}
		d.Status.Phase = dotsv1.DotReady
		d.Status.LastActivityTime = &metav1.Time{Time: now}
		patch.SetCondition(d, now, "Ready", metav1.ConditionTrue, "Ready", "up")
		patch.SetCondition(d, now, "ConfigApplied", metav1.ConditionTrue, "Applied", "generation 1")
		return d
	}
	tests := map[string]struct {
		reason string
		change func(d *dotsv1.Dot)
		want   bool
	}{
		"nothing": {
			reason: "the same facts again write nothing",
			change: func(d *dotsv1.Dot) {
				patch.SetCondition(d, now.Add(time.Hour), "Ready", metav1.ConditionTrue, "Ready", "up")
			},
		},
		"a field": {
			reason: "a field that differs is written",
			change: func(d *dotsv1.Dot) { d.Status.Phase = dotsv1.DotIdle },
			want:   true,
		},
		"an owned condition": {
			reason: "a condition of the writer's that differs is written",
			change: func(d *dotsv1.Dot) {
				patch.SetCondition(d, now, "Ready", metav1.ConditionFalse, "Down", "down")
			},
			want: true,
		},
		"within the second": {
			reason: "a time a write carries the same (RFC 3339, whole seconds) is no change",
			change: func(d *dotsv1.Dot) {
				d.Status.LastActivityTime = &metav1.Time{Time: now.Add(300 * time.Millisecond)}
			},
		},
		"a monotonic reading": {
			reason: "the same instant with a clock's monotonic reading is no change",
			change: func(d *dotsv1.Dot) {
				mono := time.Now()
				d.Status.LastActivityTime = &metav1.Time{Time: mono}
				d.Status.LastActivityTime.Time = d.Status.LastActivityTime.Add(now.Sub(mono.Round(0)))
			},
		},
		"another's condition": {
			reason: "a condition the writer does not own is put back, not written",
			change: func(d *dotsv1.Dot) {
				patch.SetCondition(d, now, "ConfigApplied", metav1.ConditionFalse, "Failed", "no")
			},
		},
		"order alone": {
			reason: "the conditions reordered write nothing",
			change: func(d *dotsv1.Dot) {
				c := d.Status.Conditions
				c[0], c[1] = c[1], c[0]
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			d := read()
			h := patch.NewHelper(nil, computers, d)
			tc.change(d)
			if got := h.Changed(d); got != tc.want {
				t.Errorf("%s: Changed = %v; want %v", tc.reason, got, tc.want)
			}
		})
	}
}
