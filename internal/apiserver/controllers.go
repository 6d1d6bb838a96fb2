package apiserver

import (
	"context"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/controller-manager/pkg/informerfactory"
	"k8s.io/kubernetes/pkg/controller/clusterroleaggregation"
	"k8s.io/kubernetes/pkg/controller/garbagecollector"
	namespacecontroller "k8s.io/kubernetes/pkg/controller/namespace"

	"github.com/invisible-dots/invisible-dots/internal/cachetrim"
)

// builtinControllers are the upstream controllers a control plane without
// kube-controller-manager still needs: the garbage collector (deleting a Dot
// deletes what it owns, through ownerReferences), the namespace controller
// (a deleted namespace is emptied and goes away) and the ClusterRole
// aggregation controller (the built-in admin, edit and view roles are empty
// selectors until it copies in the rules of the roles labelled to join
// them, ours for the Dots among them, so a person bound to edit or view
// reaches the Dots as on any cluster).
type builtinControllers struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

const (
	gcWorkers        = 5
	aggregateWorkers = 1
	gcSyncPeriod     = 30 * time.Second
	nsWorkers        = 2
	nsResyncPeriod   = 5 * time.Minute
	informerResync   = 12 * time.Hour
	controllerQPS    = 200
	controllerBurst  = 400
	restMapperPeriod = 30 * time.Second
)

func startBuiltinControllers(ctx context.Context, loopback *rest.Config) (*builtinControllers, error) {
	cfg := rest.CopyConfig(loopback)
	cfg.QPS, cfg.Burst = controllerQPS, controllerBurst
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	meta, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	disco, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	b := &builtinControllers{cancel: cancel}

	typed := informers.NewSharedInformerFactoryWithOptions(kube, informerResync, informers.WithTransform(cachetrim.ManagedFields))
	metaInformers := metadatainformer.NewSharedInformerFactoryWithOptions(meta, informerResync, metadatainformer.WithTransform(cachetrim.Transform))
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disco))
	started := make(chan struct{})

	gc, err := garbagecollector.NewGarbageCollector(ctx, kube, meta, mapper,
		garbagecollector.DefaultIgnoredResources(),
		informerfactory.NewInformerFactory(typed, metaInformers), started)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("create the garbage collector: %w", err)
	}
	ns := namespacecontroller.NewNamespaceController(ctx, kube, meta,
		disco.ServerPreferredNamespacedResources,
		typed.Core().V1().Namespaces(), nsResyncPeriod, v1.FinalizerKubernetes)
	aggregate := clusterroleaggregation.NewClusterRoleAggregation(typed.Rbac().V1().ClusterRoles(), kube.RbacV1())

	typed.Start(ctx.Done())
	metaInformers.Start(ctx.Done())
	close(started)

	b.run(func() { gc.Run(ctx, gcWorkers, gcSyncPeriod) })
	// Sync refreshes the REST mapper and the monitored resources, so a CRD
	// applied after start (ours) is garbage collected too.
	b.run(func() { gc.Sync(ctx, disco, gcSyncPeriod) })
	b.run(func() { ns.Run(ctx, nsWorkers) })
	b.run(func() { aggregate.Run(ctx, aggregateWorkers) })
	return b, nil
}

func (b *builtinControllers) run(f func()) {
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		f()
	}()
}

func (b *builtinControllers) stop() {
	b.cancel()
	b.wg.Wait()
}
