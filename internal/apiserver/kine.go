package apiserver

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"sync"
	"time"

	"github.com/k3s-io/kine/pkg/drivers"
	"github.com/k3s-io/kine/pkg/drivers/generic"
	"github.com/k3s-io/kine/pkg/drivers/pgsql"
	"github.com/k3s-io/kine/pkg/server"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// kineSettings holds every kine tunable. kine treats a zero value as "use
// nothing" rather than "use the default" in several places, so each one is set
// here explicitly (DESIGN.md 2).
var kineSettings = struct {
	PollInterval     time.Duration
	NotifyInterval   time.Duration
	CompactInterval  time.Duration
	CompactTimeout   time.Duration
	CompactMinRetain int64
	CompactBatchSize int64
	PollBatchSize    int64
	MaxIdleConns     int
	MaxOpenConns     int
	WriteSlots       int
	ConnMaxLifetime  time.Duration
	ConnMaxIdleTime  time.Duration
	EmulatedVersion  string
}{
	PollInterval:     time.Second,
	NotifyInterval:   5 * time.Second,
	CompactInterval:  5 * time.Minute,
	CompactTimeout:   5 * time.Second,
	CompactMinRetain: 1000,
	CompactBatchSize: 1000,
	PollBatchSize:    500,
	// An idle connection is a PostgreSQL backend of 2 to 6 MiB that waits.
	// Fewer idle ones than a burst uses makes each returned one close and
	// the next request open another (a fork and a start of a backend per
	// request: with 4, PostgreSQL was seen starting backends all through a
	// bench's create loop); so as many may stay idle as may be open, and
	// what closes them is time: one unused for ConnMaxIdleTime (a burst's
	// connections, such as the start's, where every informer lists at once:
	// 20 backends, about 55 MiB, held for a minute before), or older than
	// ConnMaxLifetime. A quiet server keeps the one or two its poll uses; a
	// busy one keeps what it uses and opens about one a second.
	// The price is the first requests of a burst after a pause: they open
	// new backends. Measured against 30 s (BenchmarkControlPlane's start,
	// idle and watch phases, 5 runs each): PostgreSQL 10 s after the start
	// 54 MiB in 14 processes against 83 MiB in 29, and create-to-ADDED p99
	// 92 ms against 84 ms (median of the runs), its worst case 2× longer.
	MaxIdleConns:    20,
	MaxOpenConns:    20,
	WriteSlots:      8,
	ConnMaxLifetime: time.Minute,
	ConnMaxIdleTime: 5 * time.Second,
	EmulatedVersion: "3.5.13",
}

// kine is the etcd v3 API over PostgreSQL, served as gRPC on a unix socket
// that only the API server in this process talks to.
type kine struct {
	socket  string
	cancel  context.CancelFunc
	grpc    *grpc.Server
	wg      sync.WaitGroup
	pending *pendingBackend
}

// startKine serves kine's etcd API on socket at once and opens its store
// (kine's Postgres driver alone: endpoint.Listen would link every driver kine
// has) once dsn answers, which waits for the database. Meanwhile every call
// waits for the store, so the API server is built while the database
// starts: about a second each on a warm start, one after the other before.
// dsn must give a database that is reachable: kine retries an unreachable
// one for minutes.
func startKine(ctx context.Context, dsn func(context.Context) (string, error), socket string) (*kine, error) {
	bctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	k := &kine{socket: socket, cancel: cancel, pending: newPendingBackend()}
	ok := false
	defer func() {
		if !ok {
			cancel()
		}
	}()
	k.grpc = grpc.NewServer(
		grpc.MaxRecvMsgSize(3*1024*1024),
		grpc.MaxSendMsgSize(math.MaxInt32),
		// The API server's etcd client pings every 30 s, with or without a
		// call under way; gRPC's default policy allows one every 5 minutes
		// and answers more with GOAWAY "too_many_pings", which drops the
		// connection and every request on it. etcd itself allows one every
		// 5 s (--grpc-keepalive-min-time): so does this.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
	)
	server.New(k.pending, "unix", kineSettings.NotifyInterval, kineSettings.EmulatedVersion).Register(k.grpc)
	if err := os.Remove(socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove stale resource store socket %s: %w", socket, err)
	}
	lis, err := (&net.ListenConfig{}).Listen(bctx, "unix", socket)
	if err != nil {
		return nil, fmt.Errorf("listen on resource store socket %s: %w", socket, err)
	}
	if err := os.Chmod(socket, 0o600); err != nil {
		lis.Close()
		return nil, fmt.Errorf("make resource store socket private: %w", err)
	}
	k.wg.Add(2)
	go func() {
		defer k.wg.Done()
		_ = k.grpc.Serve(lis)
	}()
	go func() {
		defer k.wg.Done()
		b, err := k.open(bctx, dsn)
		k.pending.settle(b, err)
	}()
	ok = true
	return k, nil
}

// open opens and starts the store once the database answers.
func (k *kine) open(ctx context.Context, dsn func(context.Context) (string, error)) (server.Backend, error) {
	d, err := dsn(ctx)
	if err != nil {
		return nil, fmt.Errorf("the resource store's database: %w", err)
	}
	_, backend, err := pgsql.New(ctx, &k.wg, &drivers.Config{
		DataSourceName: d,
		ConnectionPoolConfig: generic.ConnectionPoolConfig{
			MaxIdle:     kineSettings.MaxIdleConns,
			MaxOpen:     kineSettings.MaxOpenConns,
			MaxLifetime: kineSettings.ConnMaxLifetime,
			MaxIdleTime: kineSettings.ConnMaxIdleTime,
		},
		CompactInterval:  kineSettings.CompactInterval,
		CompactTimeout:   kineSettings.CompactTimeout,
		CompactMinRetain: kineSettings.CompactMinRetain,
		CompactBatchSize: kineSettings.CompactBatchSize,
		PollBatchSize:    kineSettings.PollBatchSize,
		PollInterval:     kineSettings.PollInterval,
	})
	if err != nil {
		return nil, fmt.Errorf("open the resource store in PostgreSQL: %w", err)
	}
	if err := backend.Start(ctx); err != nil {
		return nil, fmt.Errorf("start the resource store: %w", err)
	}
	return newWriteLimitedBackend(backend, kineSettings.WriteSlots), nil
}

// failed is closed when the store could not be opened; err says why.
func (k *kine) failed() <-chan struct{} { return k.pending.failed }

func (k *kine) err() error { return k.pending.err }

// endpoint is the etcd server address the API server is given.
func (k *kine) endpoint() string { return "unix://" + k.socket }

// stop ends the gRPC server, then the driver's background work (polling,
// compaction), and waits for both.
func (k *kine) stop() {
	select {
	case <-k.failed():
		// A start that failed for want of the database: the API server's
		// storage clients its start made are never closed, and would each
		// log their retries if their connections ended, so they are left
		// waiting on the calls that will never be answered
		// (pendingBackend.wait) until the process, which fails, exits.
		k.cancel()
		_ = os.Remove(k.socket)
		return
	default:
	}
	done := make(chan struct{})
	go func() {
		k.grpc.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		k.grpc.Stop()
	}
	k.cancel()
	k.wg.Wait()
	_ = os.Remove(k.socket)
}

// writeLimitedBackend bounds how many writes kine runs at once. A kine write
// (v0.17.5) opens a transaction and then runs its INSERT through the pool, not
// through that transaction, so each write holds one connection while it waits
// for a second: with as many concurrent writes as the pool has connections,
// every write waits on every other until their timeouts (measured: the
// control plane stopped for 30 s at the 810th of 1000 concurrent creates).
// With at most WriteSlots writes, WriteSlots*2 <= MaxOpenConns, a write
// always finds its second connection and reads keep the rest.
type writeLimitedBackend struct {
	server.Backend
	slots chan struct{}
}

func newWriteLimitedBackend(b server.Backend, slots int) *writeLimitedBackend {
	if 2*slots > kineSettings.MaxOpenConns {
		panic("kine write slots need two connections each")
	}
	return &writeLimitedBackend{Backend: b, slots: make(chan struct{}, slots)}
}

func (w *writeLimitedBackend) acquire(ctx context.Context) error {
	select {
	case w.slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (w *writeLimitedBackend) release() { <-w.slots }

func (w *writeLimitedBackend) Create(ctx context.Context, key string, value []byte, lease int64) (int64, error) {
	if err := w.acquire(ctx); err != nil {
		return 0, err
	}
	defer w.release()
	return w.Backend.Create(ctx, key, value, lease)
}

func (w *writeLimitedBackend) Update(ctx context.Context, key string, value []byte, revision, lease int64) (int64, *server.KeyValue, bool, error) {
	if err := w.acquire(ctx); err != nil {
		return 0, nil, false, err
	}
	defer w.release()
	return w.Backend.Update(ctx, key, value, revision, lease)
}

func (w *writeLimitedBackend) Delete(ctx context.Context, key string, revision int64) (int64, *server.KeyValue, bool, error) {
	if err := w.acquire(ctx); err != nil {
		return 0, nil, false, err
	}
	defer w.release()
	return w.Backend.Delete(ctx, key, revision)
}

func (w *writeLimitedBackend) Compact(ctx context.Context, revision int64) (int64, error) {
	if err := w.acquire(ctx); err != nil {
		return 0, err
	}
	defer w.release()
	return w.Backend.Compact(ctx, revision)
}

// pendingBackend is kine's store before it is open: each call waits until
// it is (or fails with why it could not be), then goes to it.
type pendingBackend struct {
	ready   chan struct{} // closed once backend or err is set
	failed  chan struct{} // closed too when err is set
	backend server.Backend
	err     error
}

func newPendingBackend() *pendingBackend {
	return &pendingBackend{ready: make(chan struct{}), failed: make(chan struct{})}
}

// settle gives the calls the open store, or the reason there is none.
func (p *pendingBackend) settle(b server.Backend, err error) {
	p.backend, p.err = b, err
	if err != nil {
		close(p.failed)
	}
	close(p.ready)
}

func (p *pendingBackend) wait(ctx context.Context) (server.Backend, error) {
	select {
	case <-p.ready:
		if p.err != nil {
			// The start fails with it (Server.waitReady) and stops kine,
			// which ends this call; an answer now would only be retried
			// and logged by every client of the API server until then.
			<-ctx.Done()
			return nil, p.err
		}
		return p.backend, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Start does nothing: the store is started once it is open (kine.open).
func (p *pendingBackend) Start(context.Context) error { return nil }

func (p *pendingBackend) Get(ctx context.Context, key string, revision int64, keysOnly bool) (int64, *server.KeyValue, error) {
	b, err := p.wait(ctx)
	if err != nil {
		return 0, nil, err
	}
	return b.Get(ctx, key, revision, keysOnly)
}

func (p *pendingBackend) Create(ctx context.Context, key string, value []byte, lease int64) (int64, error) {
	b, err := p.wait(ctx)
	if err != nil {
		return 0, err
	}
	return b.Create(ctx, key, value, lease)
}

func (p *pendingBackend) Delete(ctx context.Context, key string, revision int64) (int64, *server.KeyValue, bool, error) {
	b, err := p.wait(ctx)
	if err != nil {
		return 0, nil, false, err
	}
	return b.Delete(ctx, key, revision)
}

func (p *pendingBackend) List(ctx context.Context, key, end string, limit, revision int64, keysOnly bool) (int64, []*server.KeyValue, error) {
	b, err := p.wait(ctx)
	if err != nil {
		return 0, nil, err
	}
	return b.List(ctx, key, end, limit, revision, keysOnly)
}

func (p *pendingBackend) ListStream(ctx context.Context, key, end string, limit, revision int64, keysOnly bool) server.ListResult {
	b, err := p.wait(ctx)
	if err != nil {
		kvs, errs := make(chan *server.KeyValue), make(chan error, 1)
		close(kvs)
		errs <- err
		return server.ListResult{KVc: kvs, Errorc: errs}
	}
	return b.ListStream(ctx, key, end, limit, revision, keysOnly)
}

func (p *pendingBackend) Count(ctx context.Context, key, end string, revision int64) (int64, int64, error) {
	b, err := p.wait(ctx)
	if err != nil {
		return 0, 0, err
	}
	return b.Count(ctx, key, end, revision)
}

func (p *pendingBackend) Update(ctx context.Context, key string, value []byte, revision, lease int64) (int64, *server.KeyValue, bool, error) {
	b, err := p.wait(ctx)
	if err != nil {
		return 0, nil, false, err
	}
	return b.Update(ctx, key, value, revision, lease)
}

func (p *pendingBackend) Watch(ctx context.Context, revision int64) server.WatchResult {
	b, err := p.wait(ctx)
	if err != nil {
		events, errs := make(chan server.EventBatch), make(chan error, 1)
		close(events)
		errs <- err
		return server.WatchResult{Eventc: events, Errorc: errs}
	}
	return b.Watch(ctx, revision)
}

func (p *pendingBackend) DbSize(ctx context.Context) (int64, error) {
	b, err := p.wait(ctx)
	if err != nil {
		return 0, err
	}
	return b.DbSize(ctx)
}

func (p *pendingBackend) CurrentRevision(ctx context.Context) (int64, error) {
	b, err := p.wait(ctx)
	if err != nil {
		return 0, err
	}
	return b.CurrentRevision(ctx)
}

func (p *pendingBackend) Compact(ctx context.Context, revision int64) (int64, error) {
	b, err := p.wait(ctx)
	if err != nil {
		return 0, err
	}
	return b.Compact(ctx, revision)
}
