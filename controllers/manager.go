// Package controllers holds the central controllers: one reconciler per
// concern (Dots, Tasks, Approvals, the Webhooks' owners, placement of
// Computers on hosts, the lifecycle of hosts, and a Dot's work: dispatch,
// approval requests, MCP additions, activity status and power, over one
// view of each Dot's event log, WorkLog). They decide and write resources;
// they never touch a VM or a host's disk, which is the host agent's
// (hostagent/agent).
package controllers

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/internal/cachetrim"
	"github.com/invisible-dots/invisible-dots/internal/channels/hub"
	"github.com/invisible-dots/invisible-dots/internal/channels/port"
	"github.com/invisible-dots/invisible-dots/internal/hostidentity"
	"github.com/invisible-dots/invisible-dots/internal/scheme"
	"github.com/invisible-dots/invisible-dots/internal/store"
	"github.com/invisible-dots/invisible-dots/internal/upstreamlog"
)

// defaultShutdownTimeout bounds how long the manager waits for running
// reconciles when the server stops.
const defaultShutdownTimeout = 10 * time.Second

// concurrentReconciles is how many objects of one kind are reconciled at
// once: a reconcile is a few API writes, and one worker made 1000 Dots wait
// minutes for their Computers.
const concurrentReconciles = 4

// On the embedded API server the leader Lease outlives a database restart
// (see NewManager): its holder keeps trying to renew it for
// embeddedRenewDeadline before it gives up its lead.
const (
	embeddedLeaseDuration = 75 * time.Second
	embeddedRenewDeadline = 60 * time.Second
)

// renewDeadline is the renew deadline against another cluster: the
// elector's own default (with its default 15 s Lease).
const renewDeadline = 10 * time.Second

// LeaderElectionID names the central controllers' leader Lease in
// dotsv1.SystemNamespace.
const LeaderElectionID = "invisible-dots-controllers"

// hostAccessSelector selects the Roles and RoleBindings the host access reconciler
// keeps.
var hostAccessSelector = func() labels.Selector {
	req, err := labels.NewRequirement(hostidentity.AccessLabel, selection.Exists, nil)
	if err != nil {
		panic(err)
	}
	return labels.NewSelector().Add(*req)
}()

// The leader Lease, and Events of every controller.
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Options are what the central controllers need.
type Options struct {
	Config *rest.Config
	Log    logr.Logger
	// Embedded says the controllers run beside the embedded API server.
	// Either way they act only while this process holds the leader Lease,
	// so two servers against one cluster (a second for availability) never
	// both act; an embedded server takes the Lease of a killed predecessor
	// at once (see embeddedPrefix).
	Embedded bool
	// Clock is time for the reconcilers; the real clock when nil.
	Clock clock.PassiveClock
	// Store is the event log and outbox; nil runs none of the controllers
	// of a Dot's work (a test of the resources alone).
	Store *store.Store
	// Channels are the messaging channel types the hub runs (ref 9.8).
	Channels hub.Kinds
	// ChannelLinks are the link codes of Channels linked by a code
	// (WhatsApp), shared with the Dots API that streams them; nil when
	// the server links none.
	ChannelLinks *port.Links
}

// NewManager builds the central manager with every reconciler registered.
func NewManager(ctx context.Context, o Options) (ctrl.Manager, error) {
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	identity := leaderIdentity(o.Embedded)
	if o.Embedded {
		if err := releaseStaleEmbedded(ctx, o.Config, identity); err != nil {
			return nil, err
		}
	}
	lock, err := leaderLock(o.Config, identity)
	if err != nil {
		return nil, err
	}
	o.Log.Info("central controllers: waiting for the leader Lease", "lease", dotsv1.SystemNamespace+"/"+LeaderElectionID, "identity", identity)
	opts := ctrl.Options{
		Scheme: scheme.Scheme,
		// The manager gives up the Lease when it stops (release on
		// cancel), and its elector then reports the lead lost, which the
		// manager logs as an error at every clean stop.
		Logger: upstreamlog.Quiet(o.Log, 0, upstreamlog.NotError{
			Msg: "error received after stop sequence was engaged", Err: "leader election lost"}),
		Metrics:                             metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:              "0",
		LeaderElection:                      true,
		LeaderElectionID:                    LeaderElectionID,
		LeaderElectionNamespace:             dotsv1.SystemNamespace,
		LeaderElectionResourceLockInterface: lock,
		LeaderElectionReleaseOnCancel:       true,
		GracefulShutdownTimeout:             ptr.To(defaultShutdownTimeout),
		Cache: cache.Options{
			DefaultTransform: cachetrim.Transform,
			ByObject: map[client.Object]cache.ByObject{
				// Only the host access bindings of this product.
				&rbacv1.RoleBinding{}: {Label: hostAccessSelector},
				&rbacv1.Role{}:        {Label: hostAccessSelector},
			},
		},
	}
	// Set, not left to controller-runtime's default, so the error of a lost
	// lead names the deadline the elector used (leading).
	opts.RenewDeadline = ptr.To(renewDeadline)
	if o.Embedded {
		// One server per database (it holds the database's advisory lock),
		// so no other process can take the Lease: a PostgreSQL that dies
		// and is started again under the server must not cost the
		// controllers their lead, which would stop the whole server. A
		// server that is killed frees its Lease at the next start
		// (releaseStaleEmbedded), so the longer Lease delays nothing.
		opts.LeaseDuration = ptr.To(embeddedLeaseDuration)
		opts.RenewDeadline = ptr.To(embeddedRenewDeadline)
	}
	mgr, err := ctrl.NewManager(o.Config, opts)
	if err != nil {
		return nil, fmt.Errorf("create the controller manager: %w", err)
	}
	// Runs once this process leads: the log says which server's controllers
	// act.
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		o.Log.Info("central controllers lead: this process acts", "identity", identity)
		<-ctx.Done()
		return nil
	})); err != nil {
		return nil, err
	}
	if err := IndexNodeName(ctx, mgr); err != nil {
		return nil, fmt.Errorf("index computers by host: %w", err)
	}
	if err := (&DotReconciler{
		Client:       mgr.GetClient(),
		Recorder:     mgr.GetEventRecorder(DotControllerName),
		Clock:        o.Clock,
		SecretReader: mgr.GetAPIReader(),
	}).SetupWithManager(mgr); err != nil {
		return nil, err
	}
	if err := (&TaskReconciler{
		Client:   mgr.GetClient(),
		Recorder: mgr.GetEventRecorder(TaskControllerName),
		Clock:    o.Clock,
	}).SetupWithManager(mgr); err != nil {
		return nil, err
	}
	if err := (&ApprovalReconciler{
		Client:   mgr.GetClient(),
		Recorder: mgr.GetEventRecorder(ApprovalControllerName),
		Clock:    o.Clock,
	}).SetupWithManager(mgr); err != nil {
		return nil, err
	}
	if err := (&WebhookReconciler{Client: mgr.GetClient(), Clock: o.Clock}).SetupWithManager(mgr); err != nil {
		return nil, err
	}
	if err := (&PlacementReconciler{
		Client:   mgr.GetClient(),
		Recorder: mgr.GetEventRecorder(PlacementControllerName),
		Clock:    o.Clock,
	}).SetupWithManager(mgr); err != nil {
		return nil, err
	}
	if o.Store != nil {
		if err := IndexDotName(ctx, mgr); err != nil {
			return nil, fmt.Errorf("index tasks and approvals by Dot: %w", err)
		}
		// The controllers of a Dot's work, over one view of each Dot's log.
		work := &WorkLog{Store: o.Store}
		if err := work.IndexTasks(ctx, mgr); err != nil {
			return nil, fmt.Errorf("index tasks by Dot: %w", err)
		}
		if err := mgr.Add(work); err != nil {
			return nil, err
		}
		if err := (&DispatchReconciler{
			Client:   mgr.GetClient(),
			Log:      work,
			Recorder: mgr.GetEventRecorder(DispatchControllerName),
			Clock:    o.Clock,
		}).SetupWithManager(mgr); err != nil {
			return nil, err
		}
		if err := (&ApprovalRequestReconciler{
			Client:   mgr.GetClient(),
			Log:      work,
			Recorder: mgr.GetEventRecorder(ApprovalRequestControllerName),
		}).SetupWithManager(mgr); err != nil {
			return nil, err
		}
		if err := (&MCPAdditionReconciler{
			Client:   mgr.GetClient(),
			Log:      work,
			Recorder: mgr.GetEventRecorder(MCPAdditionControllerName),
		}).SetupWithManager(mgr); err != nil {
			return nil, err
		}
		if err := (&DelegationReconciler{
			Client:   mgr.GetClient(),
			Log:      work,
			Store:    o.Store,
			Recorder: mgr.GetEventRecorder(DelegationControllerName),
		}).SetupWithManager(mgr); err != nil {
			return nil, err
		}
		if err := (&ActivityStatusReconciler{
			Client:   mgr.GetClient(),
			Log:      work,
			Recorder: mgr.GetEventRecorder(ActivityStatusControllerName),
		}).SetupWithManager(mgr); err != nil {
			return nil, err
		}
		if err := (&PowerReconciler{
			Client:   mgr.GetClient(),
			Log:      work,
			Recorder: mgr.GetEventRecorder(PowerControllerName),
			Clock:    o.Clock,
		}).SetupWithManager(mgr); err != nil {
			return nil, err
		}
		if err := (&QuotaReconciler{Client: mgr.GetClient(), Store: o.Store, Recorder: mgr.GetEventRecorder(QuotaControllerName), Clock: o.Clock, Log: work}).SetupWithManager(mgr); err != nil {
			return nil, err
		}
		if err := (&LogRetentionReconciler{Client: mgr.GetClient(), Store: o.Store}).SetupWithManager(mgr); err != nil {
			return nil, err
		}
		// The channel hub runs with the lead: two pollers on one bot fail.
		channelHub := &hub.Hub{
			Store: o.Store, Kinds: o.Channels, Log: o.Log.WithName("channel-hub"),
			Approvals: &ChannelApprovals{Client: mgr.GetClient(), Reader: mgr.GetAPIReader()},
		}
		if err := (&ChannelReconciler{
			Client:       mgr.GetClient(),
			SecretReader: mgr.GetAPIReader(),
			Store:        o.Store,
			Hub:          channelHub,
			Links:        o.ChannelLinks,
			Recorder:     mgr.GetEventRecorder(ChannelControllerName),
			Clock:        o.Clock,
		}).SetupWithManager(mgr); err != nil {
			return nil, err
		}
	}
	if err := (&HostAccessReconciler{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
		return nil, err
	}
	if err := (&HostLifecycleReconciler{
		Client:   mgr.GetClient(),
		Recorder: mgr.GetEventRecorder(HostLifecycleControllerName),
		Clock:    o.Clock,
	}).SetupWithManager(mgr); err != nil {
		return nil, err
	}
	return leading{Manager: mgr, lock: lock, renewal: *opts.RenewDeadline}, nil
}
