package controllers

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
)

// A burst of a Dot's Task events is one request, once the batch's period
// has passed; nothing is ready before.
func TestTaskEventsOfADotAreBatched(t *testing.T) {
	clock := clocktesting.NewFakeClock(time.Now())
	q := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request](),
		workqueue.TypedRateLimitingQueueConfig[reconcile.Request]{Clock: clock})
	defer q.ShutDown()
	h := batched(taskBatch, delegationTaskDots)
	ctx := context.Background()
	task := func(name, dot string) *dotsv1.Task {
		return &dotsv1.Task{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Spec: dotsv1.TaskSpec{DotName: dot}}
	}
	for i := range 50 {
		h.Create(ctx, event.CreateEvent{Object: task(fmt.Sprintf("t%d", i), "busy")}, q)
	}
	h.Update(ctx, event.UpdateEvent{ObjectOld: task("t0", "busy"), ObjectNew: task("t0", "busy")}, q)
	h.Delete(ctx, event.DeleteEvent{Object: task("u", "quiet")}, q)
	if n := q.Len(); n != 0 {
		t.Fatalf("%d requests ready before the batch's period; want none", n)
	}

	clock.Step(taskBatch)
	deadline := time.Now().Add(5 * time.Second)
	for q.Len() < 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // a third request, were there one, would be ready too
	if n := q.Len(); n != 2 {
		t.Fatalf("%d requests ready after the batch's period; want 2 (one a Dot)", n)
	}
	got := map[types.NamespacedName]bool{}
	for range 2 {
		r, _ := q.Get()
		got[r.NamespacedName] = true
		q.Done(r)
	}
	for _, dot := range []string{"busy", "quiet"} {
		if !got[types.NamespacedName{Namespace: "ns", Name: dot}] {
			t.Errorf("no request for Dot %s; got %v", dot, got)
		}
	}
}
