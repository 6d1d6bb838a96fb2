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
	socket string
	cancel context.CancelFunc
	grpc   *grpc.Server
	wg     sync.WaitGroup
}

// startKine wires kine's Postgres driver alone (endpoint.Listen would link
// every driver kine has) and serves it on socket. dsn must already be known
// to reach the database: kine retries an unreachable one for minutes.
func startKine(ctx context.Context, dsn, socket string) (*kine, error) {
	bctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	k := &kine{socket: socket, cancel: cancel}
	ok := false
	defer func() {
		if !ok {
			cancel()
		}
	}()
	_, backend, err := pgsql.New(bctx, &k.wg, &drivers.Config{
		DataSourceName: dsn,
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
	if err := backend.Start(bctx); err != nil {
		return nil, fmt.Errorf("start the resource store: %w", err)
	}
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
	limited := newWriteLimitedBackend(backend, kineSettings.WriteSlots)
	server.New(limited, "unix", kineSettings.NotifyInterval, kineSettings.EmulatedVersion).Register(k.grpc)
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
	k.wg.Add(1)
	go func() {
		defer k.wg.Done()
		_ = k.grpc.Serve(lis)
	}()
	ok = true
	return k, nil
}

// endpoint is the etcd server address the API server is given.
func (k *kine) endpoint() string { return "unix://" + k.socket }

// stop ends the gRPC server, then the driver's background work (polling,
// compaction), and waits for both.
func (k *kine) stop() {
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
