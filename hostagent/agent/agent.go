// Package agent is the host agent: a controller manager of its own, for one
// host. It registers and heartbeats its Host, and reconciles only the
// Computers placed on it (its cache holds no other host's, through a field
// selector on spec.nodeName), owning everything that touches a VM: QEMU, the
// disks, the images, adoption after its own restart, health, and the guest
// link (the READY procedure, the event pump, the deliverer). It talks to the
// API server alone, never to PostgreSQL, as a kubelet never touches etcd.
//
// `invisible-dots server` runs one in process for its own machine;
// `invisible-dots agent --kubeconfig FILE` runs one alone, on another
// machine or in another home, with a credential of its own.
package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/hostagent/computer"
	"github.com/invisible-dots/invisible-dots/hostagent/deliver"
	"github.com/invisible-dots/invisible-dots/hostagent/driver"
	"github.com/invisible-dots/invisible-dots/hostagent/guestclient"
	"github.com/invisible-dots/invisible-dots/hostagent/guestlink"
	"github.com/invisible-dots/invisible-dots/hostagent/guestnotice"
	"github.com/invisible-dots/invisible-dots/hostagent/guests"
	"github.com/invisible-dots/invisible-dots/hostagent/heartbeat"
	"github.com/invisible-dots/invisible-dots/hostagent/prober"
	"github.com/invisible-dots/invisible-dots/hostagent/pump"
	"github.com/invisible-dots/invisible-dots/internal/cachetrim"
	dotsclient "github.com/invisible-dots/invisible-dots/internal/dotsapi/client"
	"github.com/invisible-dots/invisible-dots/internal/home"
	"github.com/invisible-dots/invisible-dots/internal/scheme"
)

// Options are what a host agent needs.
type Options struct {
	Config *rest.Config
	// HostName is the Host this agent runs (a DNS label).
	HostName string
	Home     home.Layout
	// Driver runs this host's VMs. Nil when the host cannot run them;
	// DriverProblem then says why, on the Host and on each Computer placed
	// here.
	Driver        driver.Driver
	DriverProblem error
	// Accelerator and QEMUVersion are reported on the Host.
	Accelerator dotsv1.Accelerator
	QEMUVersion string
	// WakeLead is host.yaml's wakeLead, reported on the Host; 0 when not
	// set.
	WakeLead time.Duration
	// Facts replaces the machine's facts (a test seam); read from the
	// kernel when nil.
	Facts func(ctx context.Context) (heartbeat.Facts, error)
	Log   logr.Logger
	Clock clock.PassiveClock
	// HeartbeatInterval is the Lease's renewal period; 10 s when zero.
	HeartbeatInterval time.Duration
	// StopGrace is how long a guest asked to power off has before it is
	// killed; 60 s when zero.
	StopGrace time.Duration
	// Guest reaches the engines of this host's guests: the READY
	// procedure, the event pump and the deliverer. The proven guest client
	// when nil; tests give a fake.
	Guest Guest
	// DeliverInterval is the deliverer's periodic pass; its default when
	// zero.
	DeliverInterval time.Duration
	// GuestListen is where the agent serves the guest routes of its
	// Computers to the control plane (package guestendpoint): an address
	// the control plane reaches, ":PORT" or "IP:PORT"; DefaultGuestListen
	// when empty.
	GuestListen string
	// GuestAdvertise is the host (a name or an address) the control plane
	// reaches the endpoint at; the listener's address when empty, which
	// must then be one (not 0.0.0.0 or ::).
	GuestAdvertise string
}

// DefaultGuestListen is the guest endpoint of an agent whose control plane
// runs on the same machine: the loopback, a port the kernel picks.
const DefaultGuestListen = "127.0.0.1:0"

// Guest is what the host agent asks of its guests: the engine's routes (the
// READY procedure's pushes, the deliverer's sends) and the raw event stream
// (the pump). *guestclient.Client is the product's.
type Guest interface {
	guestlink.Guest
	pump.Streamer
}

// dnsLabel is a Host's name.
var dnsLabel = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// ValidateHostName says what is wrong with a host name.
func ValidateHostName(name string) error {
	if !dnsLabel.MatchString(name) {
		return fmt.Errorf("host name %q is not a DNS label (1 to 63 characters of a-z, 0-9 and -, starting and ending with a letter or digit): pass --host NAME", name)
	}
	return nil
}

// DefaultHostName is this machine's host name made a DNS label: lower case,
// the first label, anything else replaced with '-'.
func DefaultHostName() (string, error) {
	h, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("read the machine's host name: %w (pass --host NAME)", err)
	}
	h, _, _ = strings.Cut(strings.ToLower(h), ".")
	h = strings.Trim(regexp.MustCompile(`[^a-z0-9-]+`).ReplaceAllString(h, "-"), "-")
	if len(h) > 63 {
		h = strings.Trim(h[:63], "-")
	}
	if h == "" {
		h = "host"
	}
	return h, ValidateHostName(h)
}

// NewManager builds the host agent's manager.
func NewManager(o Options) (ctrl.Manager, error) {
	if err := ValidateHostName(o.HostName); err != nil {
		return nil, err
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Driver == nil && o.DriverProblem == nil {
		o.DriverProblem = errors.New("no VM driver")
	}
	mgr, err := ctrl.NewManager(o.Config, ctrl.Options{
		Scheme:                 scheme.Scheme,
		Logger:                 o.Log,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		// One agent per host: nothing to elect.
		LeaderElection:          false,
		GracefulShutdownTimeout: ptr.To(10 * time.Second),
		// Several agents may share a process (one per home; the tests run
		// two), each with its own metrics-free manager.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
		Cache: cache.Options{
			DefaultTransform: cachetrim.Transform,
			ByObject: map[client.Object]cache.ByObject{
				// Only this host's Computers: the selector is served by the API
				// server (spec.nodeName is a selectable field of the CRD), so
				// other hosts' never reach this process.
				&dotsv1.Computer{}: {Field: fields.OneTermEqualSelector("spec.nodeName", o.HostName)},
			},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("create the host agent's manager: %w", err)
	}
	guest := o.Guest
	if guest == nil {
		guest = guestclient.New()
	}
	// The guest routes, for the control plane alone, through the agent's
	// own endpoint: the one path to a guest on any host. Its address and
	// certificate are published on the Host by the heartbeat.
	registry := &guests.Registry{}
	endpoint, err := listenGuestEndpoint(o, &guestProxy{host: o.HostName, guest: guest, guests: registry}, mgr.GetClient())
	if err != nil {
		return nil, err
	}
	facts := o.Facts
	if facts == nil {
		facts = machineFacts(o)
	}
	readFacts := func(ctx context.Context) (heartbeat.Facts, error) {
		f, err := facts(ctx)
		f.GuestEndpoint = endpoint.published.DeepCopy()
		return f, err
	}
	if err := mgr.Add(&heartbeat.Heartbeat{
		Client:   mgr.GetClient(),
		Reader:   mgr.GetAPIReader(),
		HostName: o.HostName,
		Facts:    readFacts,
		Clock:    o.Clock,
		Log:      o.Log.WithName("heartbeat"),
		Interval: o.HeartbeatInterval,
		Home:     o.Home,
	}); err != nil {
		return nil, err
	}
	// The running guests' health is probed off the Computer reconciler,
	// which reads the results and is woken when one changes.
	var probes *prober.Manager
	if o.Driver != nil {
		probes = prober.New(o.Driver, 0)
		if err := mgr.Add(probes); err != nil {
			return nil, err
		}
	}
	if err := (&computer.Reconciler{
		Client:        mgr.GetClient(),
		APIReader:     mgr.GetAPIReader(),
		Driver:        o.Driver,
		DriverProblem: o.DriverProblem,
		HostName:      o.HostName,
		Recorder:      mgr.GetEventRecorder(computer.ControllerName),
		Clock:         o.Clock,
		StopGrace:     o.StopGrace,
		Guests:        registry,
		Prober:        probes,
	}).SetupWithManager(mgr); err != nil {
		return nil, err
	}
	// The READY procedure. Its RequestPush is what the event pump calls on
	// a guest's agent.started, to push the key and the configuration again.
	link := &guestlink.Reconciler{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Guest:     guest,
		HostName:  o.HostName,
		Recorder:  mgr.GetEventRecorder(guestlink.ControllerName),
		// Every target is built from the VM's own record (qemu.json):
		// its QEMU's start time and boot id reach the listener rule.
		VMs:    vmRecords(o.Driver),
		Guests: registry,
		Clock:  o.Clock,
	}
	// The event pump and the deliverer talk to the control plane through
	// the Dots API's host routes, with the agent's own credential.
	dots, err := dotsclient.New(o.Config)
	if err != nil {
		return nil, err
	}
	pumps := &pump.Pumps{
		Host: o.HostName, Guest: guest, Ingest: dots, Started: link.RequestPush,
		Log: o.Log.WithName("pump"),
	}
	deliverer := &deliver.Deliverer{
		Host: o.HostName, Guest: guest, Outbox: dots, Clock: o.Clock, Interval: o.DeliverInterval,
		Log: o.Log.WithName("deliver"),
	}
	link.Listeners = []guestnotice.Listener{pumps, deliverer}
	if err := link.SetupWithManager(mgr); err != nil {
		endpoint.Close()
		return nil, err
	}
	for _, r := range []manager.Runnable{pumps, deliverer, endpoint} {
		if err := mgr.Add(r); err != nil {
			return nil, err
		}
	}
	return mgr, nil
}

// machineFacts reads the machine and the driver's images.
func machineFacts(o Options) func(ctx context.Context) (heartbeat.Facts, error) {
	return func(ctx context.Context) (heartbeat.Facts, error) {
		m, err := heartbeat.ReadMachine(o.Home.Root)
		if err != nil {
			return heartbeat.Facts{}, err
		}
		f := heartbeat.Facts{
			CPUs: m.CPUs, MemTotal: m.MemTotal, MemAvailable: m.MemAvailable,
			DiskTotal: m.DiskTotal, DiskFree: m.DiskFree, WakeLead: o.WakeLead,
		}
		if o.Driver == nil {
			f.Problem = o.DriverProblem.Error()
			return f, nil
		}
		f.Accelerator, f.QEMUVersion = o.Accelerator, o.QEMUVersion
		l, ok := o.Driver.(driver.ImageLister)
		if !ok {
			return f, nil // a driver that registers no images
		}
		imgs, err := l.Images(ctx)
		if err != nil {
			return f, fmt.Errorf("list the registered images: %w", err)
		}
		f.Images = imgs
		return f, nil
	}
}

// vmRecords is the driver as the guest link's VMs; nil (not a nil driver in
// an interface) when the host cannot run VMs.
func vmRecords(d driver.Driver) guestlink.VMs {
	if d == nil {
		return nil
	}
	return d
}
