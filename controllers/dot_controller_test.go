package controllers

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	clientfake "sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/internal/scheme"
)

// A reconcile that finds the cache older than its own last status write
// writes nothing (the write could only be refused); once the cache has the
// write, the next reconcile goes on.
func TestDotReconcileWaitsForItsOwnWrite(t *testing.T) {
	ctx := context.Background()
	key := types.NamespacedName{Namespace: "team-a", Name: "helper"}
	dot := &dotsv1.Dot{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, Finalizers: []string{dotsv1.DotFinalizer}},
		Spec:       dotsv1.DotSpec{Model: dotsv1.ModelRef{ID: "z-ai/glm-5.3-flash"}},
	}
	// stale, when set, is what the fake cache answers for the Dot: the
	// Dot as it was before the reconciler's write.
	var stale *dotsv1.Dot
	statusWrites := 0
	c := clientfake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(dot).WithStatusSubresource(&dotsv1.Dot{}).
		WithInterceptorFuncs(interceptor.Funcs{
			Get: func(ctx context.Context, c client.WithWatch, k client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				if d, ok := obj.(*dotsv1.Dot); ok && stale != nil && k == key {
					stale.DeepCopyInto(d)
					return nil
				}
				return c.Get(ctx, k, obj, opts...)
			},
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
				statusWrites++
				return c.SubResource(sub).Patch(ctx, obj, p, opts...)
			},
		}).Build()
	r := &DotReconciler{Client: c, Recorder: events.NewFakeRecorder(16), Clock: clocktesting.NewFakePassiveClock(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))}
	req := ctrl.Request{NamespacedName: key}

	before := &dotsv1.Dot{}
	if err := c.Get(ctx, key, before); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatalf("first reconcile: %v", err)
	}
	if statusWrites != 1 {
		t.Fatalf("the first reconcile wrote the status %d times, want 1 (a new Dot's phase)", statusWrites)
	}

	// The Computer it made wakes it again before the cache has the write.
	stale = before
	res, err := r.Reconcile(ctx, req)
	if err != nil {
		t.Fatalf("reconcile on a stale cache: %v", err)
	}
	if statusWrites != 1 {
		t.Errorf("a reconcile on a cache older than its own write wrote the status (%d writes)", statusWrites)
	}
	if res.RequeueAfter != staleCacheRetry {
		t.Errorf("on a stale cache the reconcile asked %+v, want to run again after %v", res, staleCacheRetry)
	}

	// The cache has the write: the reconcile goes on, and forgets.
	stale = nil
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatalf("reconcile on a fresh cache: %v", err)
	}
	if _, remembered := r.written.Load(key); remembered {
		t.Errorf("the version before the write is still remembered once the cache moved past it")
	}
}
