package postgres

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/invisible-dots/invisible-dots/internal/postgres/migrate"
)

// applicationName marks our lock connection in pg_stat_activity.
const applicationName = "invisible-dots control plane"

// Holder describes a control plane, for the message a second one gets.
type Holder struct {
	PID  int
	Host string
	Home string
}

// HolderFor describes this process serving home.
func HolderFor(home string) Holder {
	host, _ := os.Hostname()
	return Holder{PID: os.Getpid(), Host: host, Home: home}
}

func (h Holder) String() string {
	s := fmt.Sprintf("pid %d on host %s", h.PID, h.Host)
	if h.Home != "" {
		s += ", home " + h.Home
	}
	return s
}

// InstanceLock is the database's control-plane lock (ref 9.1): one control
// plane per database, so two servers with different homes on one external
// database never reconcile each other's Dots. It is a session-level advisory
// lock held on a dedicated connection for the server's life: a server that
// dies loses its session and so the lock, leaving nothing to clean up.
type InstanceLock struct {
	conn   *pgx.Conn
	holder Holder
}

// ErrLocked is what a refused HoldInstanceLock wraps.
var ErrLocked = errors.New("the database is in use by another invisible-dots control plane")

// HoldInstanceLock takes the control-plane lock of the database at dsn, or
// refuses with an error that wraps ErrLocked and names the holder.
func HoldInstanceLock(ctx context.Context, dsn string, holder Holder) (*InstanceLock, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, scrub(fmt.Errorf("parse the database URL: %w", err), dsn)
	}
	// application_name is cut at 63 bytes; the pid and host fit, the home may
	// not, so the full record also goes to control_plane_holder.
	cfg.RuntimeParams["application_name"] = truncate(fmt.Sprintf("%s pid=%d host=%s", applicationName, holder.PID, holder.Host), 63)
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, scrub(fmt.Errorf("connect to the database for the control-plane lock: %w", err), dsn)
	}
	var ok bool
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1, $2)", migrate.LockClass, migrate.LockControlPlane).Scan(&ok); err != nil {
		_ = conn.Close(context.Background())
		return nil, scrub(fmt.Errorf("take the control-plane lock: %w", err), dsn)
	}
	if !ok {
		who := describeHolder(ctx, conn)
		_ = conn.Close(context.Background())
		return nil, fmt.Errorf("%w (%s): stop that server first, or give this one another database with DATABASE_URL", ErrLocked, who)
	}
	return &InstanceLock{conn: conn, holder: holder}, nil
}

// recordHolder writes the holder's full description for a refused server to
// read. It runs after the migrations, which make the table.
func (l *InstanceLock) recordHolder(ctx context.Context) error {
	_, err := l.conn.Exec(ctx, `
INSERT INTO control_plane_holder (singleton, pid, host, home, backend_pid, since)
VALUES (true, $1, $2, $3, pg_backend_pid(), now())
ON CONFLICT (singleton) DO UPDATE SET pid = EXCLUDED.pid, host = EXCLUDED.host, home = EXCLUDED.home,
  backend_pid = EXCLUDED.backend_pid, since = EXCLUDED.since`,
		l.holder.PID, l.holder.Host, l.holder.Home)
	if err != nil {
		return fmt.Errorf("record the control-plane lock's holder: %w", err)
	}
	return nil
}

// describeHolder names the session holding the lock: the record it wrote
// when that record is its own (same backend), else what pg_stat_activity
// says of it.
func describeHolder(ctx context.Context, conn *pgx.Conn) string {
	var (
		backend int32
		app     string
		client  *string
		start   time.Time
	)
	err := conn.QueryRow(ctx, `
SELECT a.pid, a.application_name, host(a.client_addr), a.backend_start
FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.classid = $1 AND l.objid = $2 AND l.objsubid = 2
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
		uint32(migrate.LockClass), uint32(migrate.LockControlPlane)).Scan(&backend, &app, &client, &start)
	if err != nil {
		return "its holder could not be read: " + err.Error()
	}
	var h Holder
	var since time.Time
	var recBackend int32
	err = conn.QueryRow(ctx, `SELECT pid, host, home, backend_pid, since FROM control_plane_holder`).
		Scan(&h.PID, &h.Host, &h.Home, &recBackend, &since)
	if err == nil && recBackend == backend {
		return fmt.Sprintf("held by %s since %s", h, since.UTC().Format(time.RFC3339))
	}
	// Otherwise (no record yet, or the table is missing on a database the
	// holder has not migrated) pg_stat_activity still names it.
	from := "a local socket"
	if client != nil && *client != "" {
		from = *client
	}
	desc := strings.TrimSpace(strings.TrimPrefix(app, applicationName))
	if desc == "" {
		desc = "application " + strconv.Quote(app)
	}
	return fmt.Sprintf("held by %s (database session %d from %s since %s)", desc, backend, from, start.UTC().Format(time.RFC3339))
}

// Release gives the lock up and closes its connection.
func (l *InstanceLock) Release(ctx context.Context) error {
	if l == nil || l.conn == nil {
		return nil
	}
	conn := l.conn
	l.conn = nil
	if conn.IsClosed() {
		// The session ended, and a session's advisory lock with it.
		return nil
	}
	_, _ = conn.Exec(ctx, "DELETE FROM control_plane_holder WHERE backend_pid = pg_backend_pid()")
	_, err := conn.Exec(ctx, "SELECT pg_advisory_unlock($1, $2)", migrate.LockClass, migrate.LockControlPlane)
	if cerr := conn.Close(ctx); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("release the control-plane lock: %w", err)
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
