package controllers

import (
	"context"
	"time"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// taskBatch is how long the controllers keyed by Dot let the events of a
// Dot's Tasks gather before they look at the Dot. Each look reads every
// Task of the Dot, so a Dot given a hundred Tasks a second (a busy
// webhook's) was looked at up to a hundred times a second by each of five
// controllers: with 2000 Tasks, a fifth of the server's CPU
// (BenchmarkWebhookAccept with BENCH_PROFILE). Batched, each looks at most
// about ten times a second, whatever the rate. kube-controller-manager's Job
// controller batches its Pods' events the same way (syncJobBatchPeriod). A
// new or cancelled Task is acted on at most this much later; the Dot's own
// events, its Computer's and its log's are not delayed.
const taskBatch = 100 * time.Millisecond

type requestQueue = workqueue.TypedRateLimitingInterface[reconcile.Request]

// batched is an event handler that enqueues the requests toRequests maps
// an event's object to, period from now: the requests that meet in that
// time are one (the queue keeps one of each waiting).
func batched(period time.Duration, toRequests handler.MapFunc) handler.EventHandler {
	add := func(ctx context.Context, q requestQueue, objs ...client.Object) {
		for _, o := range objs {
			if o == nil {
				continue
			}
			for _, r := range toRequests(ctx, o) {
				q.AddAfter(r, period)
			}
		}
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q requestQueue) { add(ctx, q, e.Object) },
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q requestQueue) {
			add(ctx, q, e.ObjectOld, e.ObjectNew)
		},
		DeleteFunc:  func(ctx context.Context, e event.DeleteEvent, q requestQueue) { add(ctx, q, e.Object) },
		GenericFunc: func(ctx context.Context, e event.GenericEvent, q requestQueue) { add(ctx, q, e.Object) },
	}
}
