// Package controlplane starts the parts of `invisible-dots server` below the
// controllers, in order: the home's server.lock, PostgreSQL (managed or
// DATABASE_URL), kine and the embedded API server, the CRDs, and the admin
// kubeconfig. Stop takes them down in reverse. The test harness starts the
// same thing, so what is tested is what runs.
package controlplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/sirupsen/logrus"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/invisible-dots/invisible-dots/internal/admitfinalizer"
	"github.com/invisible-dots/invisible-dots/internal/apiserver"
	"github.com/invisible-dots/invisible-dots/internal/approvalonce"
	"github.com/invisible-dots/invisible-dots/internal/channels/hub"
	"github.com/invisible-dots/invisible-dots/internal/channels/port"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
	"github.com/invisible-dots/invisible-dots/internal/home"
	"github.com/invisible-dots/invisible-dots/internal/hostrestriction"
	"github.com/invisible-dots/invisible-dots/internal/objectsize"
	"github.com/invisible-dots/invisible-dots/internal/pidlock"
	"github.com/invisible-dots/invisible-dots/internal/postgres"
	"github.com/invisible-dots/invisible-dots/internal/scheme"
	"github.com/invisible-dots/invisible-dots/internal/store"
	"github.com/invisible-dots/invisible-dots/internal/tasklabel"
	"github.com/invisible-dots/invisible-dots/internal/taskowner"
)

// DefaultListenAddress is where the API listens unless INVISIBLE_DOTS_LISTEN
// says otherwise.
const DefaultListenAddress = "127.0.0.1:8787"

// Options configure Start.
type Options struct {
	Home home.Layout
	// ListenAddress is host:port of the API (INVISIBLE_DOTS_LISTEN).
	ListenAddress string
	// DatabaseURL replaces the managed PostgreSQL when set (DATABASE_URL).
	DatabaseURL string
	// ExternalKubeconfig runs against an existing cluster instead of the
	// embedded API server (--kubeconfig).
	ExternalKubeconfig string
	// EtcdServers stores the resources in an external etcd instead of kine
	// on PostgreSQL (INVISIBLE_DOTS_ETCD_SERVERS), for comparison benchmarks
	// only; PostgreSQL still holds everything else. Not with
	// ExternalKubeconfig.
	EtcdServers []string
	// RequestTimeout replaces the API server's request timeout (60 s) when
	// set; the live streams are long-running and not subject to it.
	RequestTimeout time.Duration
	// Profiling serves Go's pprof on the API port to the admin (--profiling).
	Profiling bool
	// Channels are the messaging channel types the server runs, whose
	// credentials the Dots API checks before it stores them.
	Channels hub.Kinds
	// ChannelLinks are WhatsApp's link codes, streamed by the Dots API; nil
	// when the server runs no WhatsApp.
	ChannelLinks *port.Links
	// WebURL is the web client's address, which the OpenAI-compatible
	// endpoint names where a person answers an approval; empty names none.
	WebURL string
	Log    logr.Logger
}

// ControlPlane is a started control plane.
type ControlPlane struct {
	// Config is the client configuration the controllers use: the in-process
	// loopback of the embedded API server, or the external kubeconfig's.
	Config *rest.Config
	// DB is the database of the event log and outbox.
	DB *postgres.Instance
	// API is the embedded API server; nil with an external kubeconfig.
	API *apiserver.Server
	// DotsAPI serves the Dots API with an external kubeconfig, whose API
	// server does not; nil on the embedded API server, which serves it.
	DotsAPI *apiserver.Delegated
	// KubeconfigPath is the admin kubeconfig written for people and kubectl.
	KubeconfigPath string

	home home.Layout
	lock *pidlock.Lock
	log  logr.Logger
	// store is the one Store of the event log and outbox this process uses
	// (Store), so its readers share its one listener (store.Wakeups).
	store *store.Store
	// changes are the outbox's notifications and feed the event log's, for
	// the Dots API.
	changes *store.Changes
	feed    *dotsapi.Feed
	// loopback is the API server's loopback configuration once it runs,
	// for the admission plugins that read objects; reader is the one client
	// they read through, made at their first read (loopbackReader).
	loopback atomic.Pointer[rest.Config]
	readerMu sync.Mutex
	reader   client.Reader
	// stopChanges ends the outbox's notifications, before the database.
	stopChanges func()
	// stopFeed ends the event log's feed, and with it every live stream,
	// before the API server: its shutdown waits for the requests in flight.
	stopFeed func()
}

// Start brings the control plane up. On error, whatever was started is
// stopped again.
func Start(ctx context.Context, o Options) (_ *ControlPlane, err error) {
	log := o.Log
	if o.ListenAddress == "" {
		o.ListenAddress = DefaultListenAddress
	}
	if len(o.EtcdServers) > 0 && o.ExternalKubeconfig != "" {
		return nil, errors.New("an external etcd stores the embedded API server's resources, and an external kubeconfig runs without one: choose one")
	}
	if problem := home.QEMUPathProblem(o.Home.Root); problem != nil {
		return nil, fmt.Errorf("INVISIBLE_DOTS_HOME %s cannot be used: %w; choose a plain-ASCII path without commas", o.Home.Root, problem)
	}
	if err := o.Home.Ensure(); err != nil {
		return nil, fmt.Errorf("prepare the home %s: %w", o.Home.Root, err)
	}
	cp := &ControlPlane{home: o.Home, log: log}
	defer func() {
		if err != nil {
			cp.Stop(context.WithoutCancel(ctx))
		}
	}()

	cp.lock, err = pidlock.Acquire(o.Home.ServerLock(), pidlock.Options{})
	if err != nil {
		return nil, fmt.Errorf("another invisible-dots server may be using %s: %w", o.Home.Root, err)
	}

	started := time.Now()
	// The database starts while the API server is built (about a second
	// each on a warm start, and they were one after the other): what needs
	// the database waits for it (database.wait).
	db := cp.startDatabase(ctx, o, started)
	defer func() {
		if err != nil {
			// Stop, deferred above, stops what the start made.
			_ = db.wait(context.WithoutCancel(ctx))
		}
	}()
	mounts := dotsAPIMounts(cp, db, log.WithName("dotsapi"), dotsAPIExtras{home: o.Home, channels: o.Channels, links: o.ChannelLinks, webURL: o.WebURL})

	if o.ExternalKubeconfig != "" {
		if err := db.wait(ctx); err != nil {
			return nil, err
		}
		if err := cp.startExternal(ctx, o, mounts); err != nil {
			return nil, err
		}
		return cp, nil
	}

	token, err := ensureToken(o.Home.APIToken())
	if err != nil {
		return nil, err
	}
	key, err := ensureMasterKey(o.Home.MasterKey())
	if err != nil {
		return nil, err
	}
	routeKineLogs(log.WithName("kine"))
	kineDSN := func(ctx context.Context) (string, error) {
		if err := db.wait(ctx); err != nil {
			return "", err
		}
		return cp.DB.KineDSN(), nil
	}
	cp.API, err = apiserver.Start(ctx, apiserver.Options{
		ListenAddress:  o.ListenAddress,
		PKIDir:         o.Home.PKI(),
		StateDir:       o.Home.Run() + "/apiserver",
		Token:          token,
		EncryptionKey:  key,
		KineDSN:        kineDSN,
		KineSocket:     o.Home.Run() + "/kine.sock",
		EtcdServers:    o.EtcdServers,
		Log:            log,
		RequestTimeout: o.RequestTimeout,
		Profiling:      o.Profiling,
		Admission: []apiserver.AdmissionPlugin{
			{Name: hostrestriction.Name, Plugin: hostrestriction.New(cp.loopbackReader)},
			{Name: objectsize.Name, Plugin: objectsize.New()},
			{Name: approvalonce.Name, Plugin: approvalonce.New()},
			{Name: tasklabel.Name, Plugin: tasklabel.New()},
			{Name: taskowner.Name, Plugin: taskowner.New(cp.loopbackReader)},
			{Name: admitfinalizer.Name, Plugin: admitfinalizer.New()},
		},
		Mounts: mounts,
	})
	if err != nil {
		// A database that did not start is the cause, said as it is.
		if dbErr := db.wait(ctx); dbErr != nil {
			return nil, dbErr
		}
		return nil, err
	}
	// With an external etcd nothing of the API server waited for it.
	if err := db.wait(ctx); err != nil {
		return nil, err
	}
	cp.Config = cp.API.Loopback
	cp.loopback.Store(cp.API.Loopback)
	log.Info("API server ready", "address", "https://"+o.ListenAddress, "elapsed", time.Since(started).Round(time.Millisecond))

	if err := ApplyCRDs(ctx, cp.Config); err != nil {
		return nil, err
	}
	if err := InstallSystem(ctx, cp.Config); err != nil {
		return nil, err
	}
	if err := cp.API.StartBuiltinControllers(); err != nil {
		return nil, err
	}
	ca, err := os.ReadFile(cp.API.CAFile)
	if err != nil {
		return nil, fmt.Errorf("read the CA: %w", err)
	}
	kc, err := Kubeconfig("https://"+clientAddress(o.ListenAddress), ca, token)
	if err != nil {
		return nil, err
	}
	if err := writeKubeconfig(o.Home.Kubeconfig(), kc); err != nil {
		return nil, err
	}
	cp.KubeconfigPath = o.Home.Kubeconfig()
	log.Info("control plane ready", "kubeconfig", cp.KubeconfigPath, "elapsed", time.Since(started).Round(time.Millisecond))
	return cp, nil
}

// dotsAPIMounts serve the Dots API and, beside it, the OpenAI-compatible
// endpoint (wire.OpenAIPrefix) on the API server's port, over the event log
// and outbox in db, reading Dots with the loopback credential once the
// server's authorizer let the caller through. One handler serves both: the
// first mount made makes it, the other takes it (both are given the same
// loopback and authorizer).
func dotsAPIMounts(cp *ControlPlane, db *database, log logr.Logger, x dotsAPIExtras) []apiserver.Mount {
	var (
		made    *dotsapi.Handler
		madeErr error
	)
	handler := func(loopback *rest.Config, authz authorizer.Authorizer) (*dotsapi.Handler, error) {
		if made != nil || madeErr != nil {
			return made, madeErr
		}
		if err := db.wait(db.ctx); err != nil {
			madeErr = err
			return nil, madeErr
		}
		reader, err := client.New(loopback, client.Options{Scheme: scheme.Scheme})
		if err != nil {
			madeErr = fmt.Errorf("make the Dots API's client of the API server: %w", err)
			return nil, madeErr
		}
		made, madeErr = dotsapi.New(dotsapi.Options{
			Store:      cp.store,
			Changes:    cp.changes,
			Feed:       cp.feed,
			Reader:     reader,
			Authorizer: authz,
			Log:        log,
			// Every guest, the in-process agent's included, through its
			// host agent's endpoint.
			Guests:       &dotsapi.HostGuests{Reader: reader, Writer: reader},
			Client:       reader,
			Server:       x.serverInfo(cp.DB),
			Doctor:       serverDoctor(x.home, reader),
			Channels:     x.channels,
			ChannelLinks: x.channelLinks(),
			WebURL:       x.webURL,
		})
		return made, madeErr
	}
	return []apiserver.Mount{{
		Prefix:      wire.Prefix,
		LongRunning: wire.IsLongRunningPath,
		New: func(loopback *rest.Config, authz authorizer.Authorizer) (http.Handler, error) {
			h, err := handler(loopback, authz)
			if err != nil {
				return nil, err
			}
			return h, nil
		},
	}, {
		Prefix:      wire.OpenAIPrefix,
		LongRunning: wire.IsOpenAILongRunningPath,
		New: func(loopback *rest.Config, authz authorizer.Authorizer) (http.Handler, error) {
			h, err := handler(loopback, authz)
			if err != nil {
				return nil, err
			}
			return h.OpenAI(), nil
		},
	}}
}

// database is the control plane's database as it starts: DB, the event
// log's store, and the feeds of its notifications.
type database struct {
	ctx   context.Context // the start's, for waits that have none of their own
	ready chan struct{}   // closed once the start ended; err says how
	err   error
}

// startDatabase starts the database, and over it the event log and the
// feeds of its notifications, in the background.
func (cp *ControlPlane) startDatabase(ctx context.Context, o Options, started time.Time) *database {
	db := &database{ctx: ctx, ready: make(chan struct{})}
	go func() {
		defer close(db.ready)
		db.err = cp.openDatabase(ctx, o, started)
	}()
	return db
}

// wait waits until the database is up, and says why when it is not.
func (db *database) wait(ctx context.Context) error {
	select {
	case <-db.ready:
		return db.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (cp *ControlPlane) openDatabase(ctx context.Context, o Options, started time.Time) error {
	log := cp.log
	var err error
	cp.DB, err = postgres.Start(ctx, postgres.Options{Home: o.Home.Root, DatabaseURL: o.DatabaseURL, Logger: log.WithName("postgres")})
	if err != nil {
		return err
	}
	log.Info("database ready", "at", cp.DB.Target(), "managed", cp.DB.Managed(), "elapsed", time.Since(started).Round(time.Millisecond))

	// The outbox's notifications, for the host agents' long poll: a row
	// reaches its guest as soon as its transaction commits.
	cp.store = store.New(cp.DB.Pool())
	cp.changes = cp.store.NewChanges(store.OutboxChannel, 4096, log.WithName("outbox-changes"))
	cp.stopChanges = runUntilStopped(ctx, cp.changes.Run)
	// The event log's feed, for the live streams: one reader of the log
	// for every stream, woken by the log's notifications.
	cp.feed = dotsapi.NewFeed(dotsapi.FeedOptions{Store: cp.store, Log: log.WithName("stream")})
	cp.stopFeed = runUntilStopped(ctx, cp.feed.Run)
	return nil
}

// runUntilStopped runs run in the background, past ctx's end, until the
// stop it returns is called; the stop waits for run to return.
func runUntilStopped(ctx context.Context, run func(context.Context) error) (stop func()) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = run(ctx)
	}()
	return func() {
		cancel()
		<-done
	}
}

// Store is the event log and outbox on the control plane's database, for
// the central controllers the server command starts beside it: the command
// takes it from here instead of importing the store.
func (cp *ControlPlane) Store() *store.Store { return cp.store }

// loopbackReader is the admission plugins' reader of the API server's
// objects, with its loopback credential: one client, made at the first read
// after the server runs (before, an error: the plugins then let the request
// through or refuse it, each by its own rule).
func (cp *ControlPlane) loopbackReader() (client.Reader, error) {
	cp.readerMu.Lock()
	defer cp.readerMu.Unlock()
	if cp.reader != nil {
		return cp.reader, nil
	}
	loopback := cp.loopback.Load()
	if loopback == nil {
		return nil, errors.New("the API server is not running yet")
	}
	r, err := client.New(loopback, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		return nil, err
	}
	cp.reader = r
	return r, nil
}

// clientAddress turns a listen address into one a client can dial: a
// wildcard host becomes loopback.
func clientAddress(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

// Stop stops the API server and kine, then PostgreSQL, then releases the
// home's lock: the reverse of Start.
func (cp *ControlPlane) Stop(ctx context.Context) {
	if cp.stopFeed != nil {
		cp.stopFeed()
		cp.stopFeed = nil
	}
	// The outbox's notifications end before the API server: the host
	// agents' long polls answer at once rather than at the end of their
	// wait.
	if cp.stopChanges != nil {
		cp.stopChanges()
		cp.stopChanges = nil
	}
	if cp.API != nil {
		cp.API.Stop()
		cp.API = nil
	}
	if cp.DotsAPI != nil {
		cp.DotsAPI.Stop()
		cp.DotsAPI = nil
	}
	if cp.DB != nil {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		if err := cp.DB.Stop(stopCtx); err != nil {
			cp.log.Error(err, "stop the database")
		}
		cancel()
		cp.DB = nil
	}
	if cp.lock != nil {
		if err := cp.lock.Release(); err != nil && !errors.Is(err, os.ErrNotExist) {
			cp.log.Error(err, "release the server lock")
		}
		cp.lock = nil
	}
}

// routeKineLogs sends kine's logrus output through our logger, warnings and
// up only: kine logs every SQL setup step at info.
func routeKineLogs(log logr.Logger) {
	logrus.SetOutput(io.Discard)
	logrus.SetLevel(logrus.WarnLevel)
	logrus.StandardLogger().ReplaceHooks(logrus.LevelHooks{})
	logrus.AddHook(logrusHook{log: log})
}

type logrusHook struct{ log logr.Logger }

func (logrusHook) Levels() []logrus.Level {
	return []logrus.Level{logrus.PanicLevel, logrus.FatalLevel, logrus.ErrorLevel, logrus.WarnLevel}
}

func (h logrusHook) Fire(e *logrus.Entry) error {
	if e.Level <= logrus.ErrorLevel {
		h.log.Error(nil, e.Message)
	} else {
		h.log.Info(e.Message, "level", e.Level.String())
	}
	return nil
}
