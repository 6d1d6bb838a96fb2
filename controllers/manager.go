// Package controllers holds one reconciler per concern, run by one
// controller-runtime manager on the control plane's client configuration.
package controllers

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/hostagent/driver"
	"github.com/invisible-dots/invisible-dots/internal/home"
	"github.com/invisible-dots/invisible-dots/internal/postgres"
)

// Scheme knows the built-in kinds and ours.
var Scheme = runtime.NewScheme()

func init() {
	if err := clientgoscheme.AddToScheme(Scheme); err != nil {
		panic(err)
	}
	if err := dotsv1.AddToScheme(Scheme); err != nil {
		panic(err)
	}
}

// Options are what the controllers need from the server.
type Options struct {
	Config *rest.Config
	Home   home.Layout
	// DB is the event log's database; nil in tests that need no event log.
	DB *postgres.Instance
	// Driver runs this host's VMs. Nil means no host agent runs in this
	// control plane: Computers stay PROVISIONING and say so.
	Driver driver.Driver
	Log    logr.Logger
	// APIStopped, when closed, stops the controllers (the embedded API
	// server went away).
	APIStopped <-chan struct{}
	// Clock is time for the reconcilers; the real clock when nil.
	Clock clock.PassiveClock
}

// Run starts the manager and blocks until ctx ends or APIStopped closes.
func Run(ctx context.Context, o Options) error {
	mgr, err := NewManager(o)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if o.APIStopped != nil {
		go func() {
			select {
			case <-o.APIStopped:
				o.Log.Error(errors.New("the API server stopped"), "stopping the controllers")
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	return mgr.Start(ctx)
}

// NewManager builds a manager with every reconciler registered.
func NewManager(o Options) (ctrl.Manager, error) {
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	mgr, err := ctrl.NewManager(o.Config, ctrl.Options{
		Scheme:                  Scheme,
		Logger:                  o.Log,
		Metrics:                 metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:  "0",
		LeaderElection:          false,
		GracefulShutdownTimeout: ptrDuration(defaultShutdownTimeout),
	})
	if err != nil {
		return nil, fmt.Errorf("create the controller manager: %w", err)
	}
	if err := (&DotReconciler{
		Client:   mgr.GetClient(),
		Recorder: mgr.GetEventRecorder(DotControllerName),
		Clock:    o.Clock,
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
	if o.Driver == nil {
		if err := (&UnhostedComputerReconciler{
			Client: mgr.GetClient(),
			Clock:  o.Clock,
		}).SetupWithManager(mgr); err != nil {
			return nil, err
		}
	} else if err := SetupComputerReconciler(mgr, o); err != nil {
		return nil, err
	}
	return mgr, nil
}
