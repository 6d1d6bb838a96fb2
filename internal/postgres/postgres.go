// Package postgres provides the control plane's PostgreSQL: a managed local
// server run from the host's server binaries (data in $HOME/db, a unix socket
// in $HOME/run, never TCP), or an external server named by DATABASE_URL. Start
// also applies the embedded migrations and takes the database's control-plane
// lock, so a started Instance is ready for kine and for internal/store.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/invisible-dots/invisible-dots/internal/postgres/migrate"
	"github.com/invisible-dots/invisible-dots/migrations"
)

// DefaultConnectTimeout bounds the first connection to an external server:
// kine would retry an unreachable one for minutes.
const DefaultConnectTimeout = 10 * time.Second

// Options configure Start.
type Options struct {
	// Home is INVISIBLE_DOTS_HOME; the managed server keeps its data in
	// Home/db and its socket in Home/run. The caller holds Home's server.lock.
	Home string
	// DatabaseURL, when set, is an external server (a postgres:// URL) used
	// instead of the managed one.
	DatabaseURL string
	// ConnectTimeout bounds the first connection to DatabaseURL;
	// DefaultConnectTimeout when zero.
	ConnectTimeout time.Duration
	// Logger gets our lines and PostgreSQL's own output, one line each;
	// never a DSN. The caller names it (the server uses "postgres").
	Logger logr.Logger
}

// Instance is a running database with the schema applied and the control-plane
// lock held. While it runs, a watcher keeps it so (watch.go): a managed
// PostgreSQL that dies is started again, and a control-plane lock whose
// session was lost is taken again.
type Instance struct {
	dsn     string
	target  string // where the database is, for messages; never a password
	home    string
	managed *managed // replaced by the watcher; read through current()
	pool    *pgxpool.Pool
	lock    *InstanceLock // the watcher's alone until it stops
	log     logr.Logger

	mu          sync.Mutex
	stopWatch   context.CancelFunc
	watchDone   chan struct{}
	failed      chan error
	restarts    int
	lockRetaken int
}

// Start brings the database up: the managed server (initdb on first start) or
// a reachability check of DatabaseURL, then the migrations, then the
// control-plane lock. A second control plane on the same database is refused
// with an error that names the holder.
func Start(ctx context.Context, opts Options) (_ *Instance, err error) {
	log := opts.Logger
	if log.GetSink() == nil {
		log = logr.Discard()
	}
	inst := &Instance{log: log, home: opts.Home, failed: make(chan error, 1)}
	defer func() {
		if err != nil {
			_ = inst.Stop(context.Background())
		}
	}()

	if opts.DatabaseURL != "" {
		timeout := opts.ConnectTimeout
		if timeout <= 0 {
			timeout = DefaultConnectTimeout
		}
		target, err := checkExternal(ctx, opts.DatabaseURL, timeout)
		if err != nil {
			return nil, err
		}
		inst.dsn, inst.target = opts.DatabaseURL, target
		log.Info("using an external PostgreSQL", "server", target)
	} else {
		if opts.Home == "" {
			return nil, errors.New("postgres: no home directory given for the managed database")
		}
		m, err := startManaged(ctx, opts.Home, log)
		if err != nil {
			return nil, err
		}
		inst.managed = m
		inst.dsn, inst.target = m.dsn(databaseName), "unix socket in "+m.runDir
	}

	inst.lock, err = HoldInstanceLock(ctx, inst.dsn, HolderFor(opts.Home))
	if err != nil {
		return nil, err
	}
	applied, err := migrate.Apply(ctx, inst.lock.conn, migrations.FS)
	if err != nil {
		return nil, scrub(err, inst.dsn)
	}
	if len(applied) > 0 {
		log.Info("applied migrations", "files", applied)
	}
	if err := inst.lock.recordHolder(ctx); err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(inst.dsn)
	if err != nil {
		return nil, scrub(fmt.Errorf("parse the database URL: %w", err), inst.dsn)
	}
	cfg.MaxConns = 8
	// A connection idle for 5 s is closed (pgx's default is 30 minutes,
	// looked at every minute): each is a PostgreSQL backend that holds 2 to
	// 6 MiB while it waits, and a burst's (the start's, a Dot's turn's)
	// would otherwise stay a minute or more after it. A turn's writes come
	// well within 5 s of each other, so a working Dot keeps its connection.
	cfg.MaxConnIdleTime = 5 * time.Second
	cfg.HealthCheckPeriod = 5 * time.Second
	inst.pool, err = pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, scrub(fmt.Errorf("open a connection pool to %s: %w", inst.target, err), inst.dsn)
	}
	inst.startWatch()
	return inst, nil
}

// DSN is a pgx connection URL for the database (over the unix socket when
// managed). It may carry DATABASE_URL's password: never log it.
func (i *Instance) DSN() string { return i.dsn }

// KineDSN is the same database as DSN (kine keeps its one table beside ours)
// in the form kine's Postgres driver takes as drivers.Config.DataSourceName:
// without the scheme, which the driver puts back itself.
func (i *Instance) KineDSN() string { return kineForm(i.dsn) }

func kineForm(dsn string) string {
	for _, scheme := range []string{"postgres://", "postgresql://"} {
		if rest, ok := strings.CutPrefix(dsn, scheme); ok {
			return rest
		}
	}
	return dsn
}

// Target says where the database is, without credentials, for logs.
func (i *Instance) Target() string { return i.target }

// Managed is true when the database is our own child PostgreSQL.
func (i *Instance) Managed() bool { return i.current() != nil }

// current is the managed server now running, nil for an external one.
func (i *Instance) current() *managed {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.managed
}

// Pool is a small connection pool for internal/store; Stop closes it.
func (i *Instance) Pool() *pgxpool.Pool { return i.pool }

// Stop releases the control-plane lock and stops the managed server. Call it
// after everything that uses the database (kine, the API server) stopped.
// ctx bounds the wait for PostgreSQL's fast shutdown before harder signals;
// a ctx that is already done (the signal context that started the shutdown)
// bounds nothing, so a clean stop is still tried.
func (i *Instance) Stop(ctx context.Context) error {
	if ctx.Err() != nil {
		ctx = context.WithoutCancel(ctx)
	}
	// The watcher first: it must not start again what is being stopped,
	// and the lock's connection is its alone until it returns.
	i.endWatch()
	var errs []error
	if i.pool != nil {
		i.pool.Close()
		i.pool = nil
	}
	if i.lock != nil {
		errs = append(errs, i.lock.Release(ctx))
		i.lock = nil
	}
	if i.managed != nil {
		errs = append(errs, i.managed.stop(ctx))
		if err := errors.Join(errs...); err == nil {
			i.log.Info("PostgreSQL stopped")
		}
		i.managed = nil
	}
	return errors.Join(errs...)
}

// checkExternal connects once to rawURL within timeout and returns a
// description of the server without credentials.
func checkExternal(ctx context.Context, rawURL string, timeout time.Duration) (string, error) {
	if !strings.HasPrefix(rawURL, "postgres://") && !strings.HasPrefix(rawURL, "postgresql://") {
		return "", errors.New("DATABASE_URL must be a postgres:// URL (kine takes no other form)")
	}
	cfg, err := pgx.ParseConfig(rawURL)
	if err != nil {
		return "", scrub(fmt.Errorf("DATABASE_URL is not a valid PostgreSQL URL: %w", err), rawURL)
	}
	target := describeTarget(cfg)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return "", scrub(fmt.Errorf("cannot reach the PostgreSQL server at %s (DATABASE_URL) within %s: check that it runs and accepts connections from here: %w",
			target, timeout, err), rawURL)
	}
	_ = conn.Close(context.Background())
	return target, nil
}

func describeTarget(cfg *pgx.ConnConfig) string {
	addr := func(host string, port uint16) string {
		if strings.HasPrefix(host, "/") {
			return fmt.Sprintf("unix socket %s/.s.PGSQL.%d", host, port)
		}
		return fmt.Sprintf("%s:%d", host, port)
	}
	hosts := []string{addr(cfg.Host, cfg.Port)}
	for _, fb := range cfg.Fallbacks {
		if a := addr(fb.Host, fb.Port); a != hosts[0] {
			hosts = append(hosts, a)
		}
	}
	return strings.Join(hosts, ", ") + " database " + cfg.Database
}

// scrubbedError hides a password that a driver message might repeat, while
// keeping the cause reachable with errors.Is and errors.As.
type scrubbedError struct {
	msg   string
	cause error
}

func (e *scrubbedError) Error() string { return e.msg }
func (e *scrubbedError) Unwrap() error { return e.cause }

// scrub removes rawURL's password from err's text.
func scrub(err error, rawURL string) error {
	if err == nil {
		return nil
	}
	secrets := passwords(rawURL)
	if len(secrets) == 0 {
		return err
	}
	msg := err.Error()
	for _, s := range secrets {
		msg = strings.ReplaceAll(msg, s, "xxxxx")
	}
	return &scrubbedError{msg: msg, cause: err}
}

// passwords lists the forms a URL's password may appear in.
func passwords(rawURL string) []string {
	var out []string
	add := func(s string) {
		if s != "" {
			out = append(out, s)
		}
	}
	if u, err := url.Parse(rawURL); err == nil {
		if p, ok := u.User.Password(); ok {
			add(p)
			add(url.UserPassword("x", p).String()[2:])
		}
		add(u.Query().Get("password"))
	}
	if cfg, err := pgx.ParseConfig(rawURL); err == nil {
		add(cfg.Password)
	}
	if p := os.Getenv("PGPASSWORD"); p != "" {
		add(p)
	}
	return out
}
