// Package browser is the Dot's browser identities (ref 6): the one manager
// behind both the engine's /browser-identities routes and the model's
// browser_identity_* and page tools, so its limits hold for both.
//
// An identity is a row of dots_browser_identities and a directory
// /home/dot/browsers/<id>/ holding its Chromium profile. Launching one starts
// the image's @playwright/mcp (INVISIBLE_DOTS_MCP_COMMAND) through the
// engine's one MCP client (mcphost), as the dot user through `dot-agentd
// relay`, on the Dot's desktop, with that profile; its proxy, when it has
// one, goes to the server in its environment only (PLAYWRIGHT_MCP_PROXY_SERVER
// named with --env-from), never on a command line. Whether an identity is
// open is never stored: it is whether this process holds a live server for
// it.
//
// Time zone and locale: Chromium takes them from the computer (the VM's time
// zone and dot's locale), which follow the VM's egress as far as the image
// sets them. Nothing here learns the exit of an identity's own proxy: an
// identity with a proxy elsewhere shows the computer's time zone and locale,
// not the proxy's (@playwright/mcp has no setting that follows the exit).
package browser

import (
	"cmp"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/invisible-dots/invisible-dots/guest/agentd/proxyfwd"
	"github.com/invisible-dots/invisible-dots/guest/engine/browser/exitplace"
	"github.com/invisible-dots/invisible-dots/guest/engine/images"
	"github.com/invisible-dots/invisible-dots/guest/engine/mcphost"
	"github.com/invisible-dots/invisible-dots/guest/engine/store"
	"github.com/invisible-dots/invisible-dots/guest/engine/tools"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// The settings of @playwright/mcp the manager uses (its CLI options and the
// one environment variable, which it reads as it reads --proxy-server).
const (
	EnvProxy       = "PLAYWRIGHT_MCP_PROXY_SERVER"
	ViewportSize   = "1280x720"
	Display        = ":0"
	toolClose      = "browser_close"
	toolTabs       = "browser_tabs"
	toolScreenshot = "browser_take_screenshot"
	closeWait      = 30 * time.Second
	// A launch that failed is asked again (ref 6): after 2 s, doubling to
	// 30 s, for 15 minutes in all.
	launchRetry    = 2 * time.Second
	launchRetryMax = 30 * time.Second
	launchPatience = 15 * time.Minute
	// DefaultStartupTimeout is the bound of one start of the browser's
	// server where Options give none: Node loading @playwright/mcp on
	// a computer just booted under emulation took over a minute (ref 7's
	// 60 s default is a declared server's).
	DefaultStartupTimeout = 3 * time.Minute
	notOpenText           = "identity is not open; call browser_identity_launch first"
	profileDirName        = "profile"
	outputDirName         = "output"
	outputMaxSize         = "67108864"
	maxSlugLen            = 24
	idSuffixLen           = 6
	idSuffixLetters       = "abcdefghijklmnopqrstuvwxyz0123456789"
)

// Error is a refusal with the protocol's code (protocol.ErrNotFound,
// ErrInvalid, ErrLimit, ErrNotOpen, ErrBusy, ErrFrameFailed, ErrCrashed) and
// a message a person or the model reads. It never holds a proxy.
type Error struct {
	Code    string
	Message string
}

func (e *Error) Error() string { return e.Message }

func refuse(code, format string, a ...any) error {
	return &Error{Code: code, Message: fmt.Sprintf(format, a...)}
}

// Options make a Manager.
type Options struct {
	Store *store.Store
	// Command is the browser's MCP server (INVISIBLE_DOTS_MCP_COMMAND); ""
	// is a computer without a browser: a launch says so.
	Command string
	// Args are added to every start of Command (a test's --headless).
	Args []string
	// Forwarder is dot-agentd as dot runs it (INVISIBLE_DOTS_AGENTD_BIN):
	// an identity whose proxy has a user and password starts Command under
	// its `proxy-forward` (package proxyfwd), which gives the browser a
	// proxy on the loopback without credentials. "" refuses such a launch.
	Forwarder string
	// Home is the Dot's home; the profiles are under Home/browsers.
	Home string
	// Dial reaches a server started from cfg with its secrets (the
	// declared servers' launcher, mcphost.Launcher.Dialer).
	Dial func(cfg protocol.MCPServerConfig, secrets map[string]string) mcphost.Dialer
	// Remove deletes a directory of the Dot's home as dot.
	Remove func(ctx context.Context, dir string) error
	// StartupTimeout bounds one start of a launch (DefaultStartupTimeout
	// when zero); CallTimeout one call (ref 7's MCP default when zero).
	StartupTimeout, CallTimeout time.Duration
	// Offered says which of the server's tools the model is offered; nil is
	// the permission table's (tools.BrowserPageTools), a test's fake server
	// may name others.
	Offered func(tool string) bool
	// LaunchRetry is the first wait before a launch that failed is asked
	// again, doubling to 30 s, for LaunchPatience in all (ref 6: 2 s and 15
	// minutes, when zero): a computer just booted, emulated or busy can take
	// longer than one start's bound to load the server and its browser.
	LaunchRetry, LaunchPatience time.Duration
	// FrameWait is how long a frame waits for the call in flight
	// (protocol.BrowserFrameWaitSeconds when zero).
	FrameWait time.Duration
	// ServerEnd is how long ending an identity's server may take once its
	// browser was asked to close (the relay's input ends, then SIGTERM,
	// then SIGKILL). A close bounded by its caller's deadline (CloseAll on
	// SIGTERM, ref 8.7) keeps that much of it for the end, so a browser
	// that does not close in time is still killed within the bound.
	ServerEnd time.Duration
	// Watch finds the browser a launch opened with the profile profile and
	// watches it (WatchChromium when nil), so a browser that dies under a
	// living server is a crash, never a browser the server reopens blank.
	Watch func(ctx context.Context, profile string) (Process, error)
	// Place learns where an identity's browser meets the internet through
	// its proxy ("": the computer's egress), at each launch, so its time
	// zone and locale follow that exit (ref 6; package exitplace). Nil
	// leaves every browser with the computer's.
	Place func(ctx context.Context, proxy string) exitplace.Place
	// ConfigDir holds each launch's @playwright/mcp configuration file (the
	// exit's time zone and locale), which the server reads as dot: a
	// directory the engine writes and every user reads (the engine's
	// RuntimeDirectory). Empty places no browser.
	ConfigDir string
	Log       *slog.Logger
}

// Manager keeps the identities and their open browsers.
type Manager struct {
	o Options

	mu   sync.Mutex
	open map[string]*session
	ops  map[string]*sync.Mutex // one launch, close or delete of an identity at a time
	// launching counts the launches under way, which hold a place among
	// the open ones (two turns may launch two identities at once).
	launching    int
	tools        []mcphost.Tool // the server's tools, as it last listed them
	instructions string         // what the server said at initialize, as it last said it
	// crashed holds the identities whose browser or server ended without
	// being asked, with what ended, until a launch opens them again: every
	// call and frame says so meanwhile.
	crashed map[string]string
	// gathered is set once Proxies gathered the proxies of older
	// identities into dots_masked.
	gathered atomic.Bool
	// masked is what Proxies last gave, kept while maskedVersion stays what
	// it was when dots_masked was read (maskedAt): Proxies runs after every
	// turn, and the table changes only when an identity is made with a
	// proxy, whose transaction moves the version on.
	maskedMu      sync.Mutex
	maskedVersion uint64
	maskedAt      uint64
	masked        []string
	maskedValid   bool
}

// session is one open identity: its server and the call in flight on it.
type session struct {
	id, name string
	srv      *mcphost.Server
	proc     Process       // the browser the server launched; nil when it could not be found
	stop     chan struct{} // closed when the session ends, which ends its watch
	busy     chan struct{} // a one-slot semaphore held by a call or a frame
	used     time.Time     // for the least-recently-used order; a frame does not move it
}

// New returns a manager; the identities it keeps are the store's.
func New(o Options) *Manager {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.FrameWait == 0 {
		o.FrameWait = protocol.BrowserFrameWaitSeconds * time.Second
	}
	if o.Offered == nil {
		o.Offered = func(name string) bool { _, ok := tools.BrowserPageTools[name]; return ok }
	}
	if o.Watch == nil {
		o.Watch = WatchChromium
	}
	return &Manager{o: o, open: map[string]*session{}, ops: map[string]*sync.Mutex{}, crashed: map[string]string{}}
}

// Dir is an identity's directory; the profile and the server's output are
// below it.
func (m *Manager) Dir(id string) string { return path.Join(m.o.Home, "browsers", id) }

type row struct {
	id, name string
	proxy    sql.NullString
	created  int64
	lastUsed sql.NullInt64
}

func (m *Manager) rows(ctx context.Context) ([]row, error) {
	var out []row
	err := m.o.Store.Read(ctx, func(q store.Querier) error {
		rs, err := q.QueryContext(ctx, "SELECT id, name, proxy, created_ms, last_used_ms FROM dots_browser_identities ORDER BY created_ms, rowid")
		if err != nil {
			return fmt.Errorf("read browser identities: %w", err)
		}
		defer rs.Close()
		for rs.Next() {
			var r row
			if err := rs.Scan(&r.id, &r.name, &r.proxy, &r.created, &r.lastUsed); err != nil {
				return err
			}
			out = append(out, r)
		}
		return rs.Err()
	})
	return out, err
}

func (m *Manager) row(ctx context.Context, id string) (row, error) {
	rows, err := m.rows(ctx)
	if err != nil {
		return row{}, err
	}
	for _, r := range rows {
		if r.id == id {
			return r, nil
		}
	}
	return row{}, refuse(protocol.ErrNotFound, "there is no browser identity %q", id)
}

func (m *Manager) shape(r row) protocol.BrowserIdentity {
	bi := protocol.BrowserIdentity{ID: r.id, Name: r.name, HasProxy: r.proxy.Valid, CreatedAtMS: r.created, Open: m.session(r.id) != nil}
	if r.lastUsed.Valid {
		v := r.lastUsed.Int64
		bi.LastUsedAtMS = &v
	}
	return bi
}

// List is every identity, oldest first.
func (m *Manager) List(ctx context.Context) ([]protocol.BrowserIdentity, error) {
	m.reap(ctx)
	rows, err := m.rows(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]protocol.BrowserIdentity, 0, len(rows))
	for _, r := range rows {
		out = append(out, m.shape(r))
	}
	return out, nil
}

// Get is one identity.
func (m *Manager) Get(ctx context.Context, id string) (protocol.BrowserIdentity, error) {
	m.reap(ctx)
	r, err := m.row(ctx, id)
	if err != nil {
		return protocol.BrowserIdentity{}, err
	}
	return m.shape(r), nil
}

// Counts are GET /health's browser counts.
func (m *Manager) Counts(ctx context.Context) protocol.BrowserCounts {
	m.reap(ctx)
	var n int
	_ = m.o.Store.Read(ctx, func(q store.Querier) error {
		return q.QueryRowContext(ctx, "SELECT COUNT(*) FROM dots_browser_identities").Scan(&n)
	})
	m.mu.Lock()
	defer m.mu.Unlock()
	return protocol.BrowserCounts{Identities: n, Open: len(m.open)}
}

// Create makes an identity, closed. A proxy that is nil or blank is none; one
// that is a string is kept as written, judged by the browser at its launch.
func (m *Manager) Create(ctx context.Context, name string, proxy *string) (protocol.BrowserIdentity, error) {
	name = strings.TrimSpace(name)
	switch {
	case name == "":
		return protocol.BrowserIdentity{}, refuse(protocol.ErrInvalid, "an identity needs a name")
	case utf8.RuneCountInString(name) > protocol.BrowserNameMaxLen:
		return protocol.BrowserIdentity{}, refuse(protocol.ErrInvalid, "an identity's name is at most %d characters", protocol.BrowserNameMaxLen)
	case strings.IndexFunc(name, unicode.IsControl) >= 0:
		return protocol.BrowserIdentity{}, refuse(protocol.ErrInvalid, "an identity's name is one line of text")
	}
	var px sql.NullString
	if proxy != nil && strings.TrimSpace(*proxy) != "" {
		px = sql.NullString{String: *proxy, Valid: true}
	}
	r := row{id: newID(name), name: name, proxy: px}
	err := m.o.Store.Write(ctx, "browser-create", func(tx *store.Tx) error {
		var n int
		if err := tx.QueryRow(ctx, "SELECT COUNT(*) FROM dots_browser_identities").Scan(&n); err != nil {
			return fmt.Errorf("count browser identities: %w", err)
		}
		if n >= protocol.BrowserMaxIdentities {
			return refuse(protocol.ErrLimit, "a Dot keeps at most %d browser identities; delete one first", protocol.BrowserMaxIdentities)
		}
		r.created = tx.Now().UnixMilli()
		if _, err := tx.Exec(ctx, "INSERT INTO dots_browser_identities(id, name, proxy, created_ms) VALUES (?, ?, ?, ?)",
			r.id, r.name, r.proxy, r.created); err != nil {
			return fmt.Errorf("store browser identity: %w", err)
		}
		if r.proxy.Valid {
			if _, err := tx.Exec(ctx, "INSERT INTO dots_masked(value) VALUES (?) ON CONFLICT DO NOTHING", r.proxy.String); err != nil {
				return fmt.Errorf("keep the proxy for masking: %w", err)
			}
			// Before the commit: a Proxies that read the table before it
			// does not keep what it read.
			m.maskedMu.Lock()
			m.maskedVersion++
			m.maskedMu.Unlock()
		}
		_, err := tx.Emit(ctx, protocol.EventBrowserIdentityCreated, protocol.BrowserIdentityEvent{IdentityID: r.id, Name: r.name})
		return err
	})
	if err != nil {
		return protocol.BrowserIdentity{}, err
	}
	return m.shape(r), nil
}

// newID is a slug of the name and a short random suffix.
func newID(name string) string {
	var b strings.Builder
	dash := false
	for _, c := range strings.ToLower(name) {
		switch {
		case c < utf8.RuneSelf && (unicode.IsLetter(c) || unicode.IsDigit(c)):
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			dash = false
			b.WriteRune(c)
		default:
			dash = true
		}
		if b.Len() >= maxSlugLen {
			break
		}
	}
	slug := strings.Trim(b.String(), "-")
	if slug == "" {
		slug = "identity"
	}
	var r [idSuffixLen]byte
	_, _ = rand.Read(r[:])
	for i := range r {
		r[i] = idSuffixLetters[int(r[i])%len(idSuffixLetters)]
	}
	return slug + "-" + string(r[:])
}

// op serializes the launch, close and delete of one identity: a close or a
// delete of an identity that is still opening waits for that launch.
func (m *Manager) op(id string) func() {
	m.mu.Lock()
	l, ok := m.ops[id]
	if !ok {
		l = &sync.Mutex{}
		m.ops[id] = l
	}
	m.mu.Unlock()
	l.Lock()
	return l.Unlock
}

func (m *Manager) session(id string) *session {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.open[id]
}

// detach takes an identity's session out of the open ones; nil when it was
// not open.
func (m *Manager) detach(id string) *session {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.open[id]
	delete(m.open, id)
	return s
}

// reap closes, as a call that found out would, the sessions whose browser or
// server ended (a crash, or the browser's last window closed). The watch of
// each browser does so as it happens; this is the check of the moment.
func (m *Manager) reap(ctx context.Context) {
	m.mu.Lock()
	var gone []*session
	for _, s := range m.open {
		if m.gone(s) != "" {
			gone = append(gone, s)
		}
	}
	m.mu.Unlock()
	for _, s := range gone {
		m.crash(ctx, s, m.gone(s))
	}
}

// gone says what of an open session ended, "" when both its browser and its
// server run.
func (m *Manager) gone(s *session) string {
	if s.proc != nil && !s.proc.Alive() {
		return "its Chromium ended"
	}
	if s.srv.Status().State != protocol.MCPConnected {
		return "its browser's server ended"
	}
	return ""
}

// watch closes s as crashed as soon as its browser ends.
func (m *Manager) watch(s *session) {
	if s.proc == nil {
		return
	}
	go func() {
		select {
		case <-s.proc.Done():
			m.crash(context.Background(), s, "its Chromium ended")
		case <-s.stop:
		}
	}()
}

// crash closes an open session whose browser or server ended without being
// asked (ref 6): its server is stopped at once, so it cannot launch a new
// browser on a blank page at the next call, browser.identity.closed says
// crashed, and the identity answers crashed until a launch. A session
// already closed (a close, a delete, the LRU, an earlier crash) is left
// alone.
func (m *Manager) crash(ctx context.Context, s *session, why string) {
	m.mu.Lock()
	if m.open[s.id] != s {
		m.mu.Unlock()
		return
	}
	delete(m.open, s.id)
	m.crashed[s.id] = why
	m.mu.Unlock()
	m.o.Log.Warn("browser crashed", "identity", s.id, "why", why)
	m.ended(ctx, s, false, 0)
}

// crashedText is what a call or a frame of a crashed identity answers.
func crashedText(id, why string) string {
	return fmt.Sprintf("The browser of %s crashed (%s), so the identity is closed and the call was not made again; "+
		"call browser_identity_launch to open it again, as the same person, on a blank page.", id, why)
}

// crashedWhy is what ended an identity that crashed, "" when it did not.
func (m *Manager) crashedWhy(id string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.crashed[id]
}

// ended stops a detached session and records browser.identity.closed (with
// the reason crashed when its browser or server ended unasked); asked is
// whether the browser is asked to close first (it is gone otherwise), for at
// most wait; ctx's cancel does not cut that wait (the call that found a
// browser gone may be cancelled).
func (m *Manager) ended(ctx context.Context, s *session, asked bool, wait time.Duration) {
	if asked && wait > 0 {
		// The browser closes its pages and flushes its profile before the
		// server ends; a call in flight gets to finish first.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), wait)
		select {
		case s.busy <- struct{}{}:
			if r := s.srv.Call(cctx, toolClose, json.RawMessage("{}")); !r.OK {
				m.o.Log.Warn("browser did not close cleanly", "identity", s.id, "result", r.Text)
			}
		case <-cctx.Done():
		}
		cancel()
	}
	// Ending the server ends its browser, closed or not (the relay ends the
	// process group it started, ref 5.2).
	s.srv.Close()
	close(s.stop)
	if s.proc != nil {
		s.proc.Close()
	}
	ev := protocol.BrowserIdentityEvent{IdentityID: s.id, Name: s.name}
	if !asked {
		reason := protocol.BrowserClosedCrashed
		ev.Reason = &reason
	}
	// Recorded even when the call that found out was cancelled: the browser
	// is gone either way.
	wctx := context.WithoutCancel(ctx)
	err := m.o.Store.Write(wctx, "browser-closed", func(tx *store.Tx) error {
		_, err := tx.Emit(wctx, protocol.EventBrowserIdentityClosed, ev)
		return err
	})
	if err != nil {
		m.o.Log.Error("record browser.identity.closed", "identity", s.id, "err", err)
	}
	m.o.Log.Info("browser closed", "identity", s.id)
}

// closeWait is how long CloseAll gives a browser to close when asked:
// closeWait (ref 6: up to 30 s, so its profile is flushed), within ctx's
// deadline less what ending its server takes (SIGTERM gives the browsers 4 s,
// ref 8.7).
func (m *Manager) closeWait(ctx context.Context) time.Duration {
	d, ok := ctx.Deadline()
	if !ok {
		return closeWait
	}
	return min(closeWait, time.Until(d)-m.o.ServerEnd)
}

// Close closes an identity's browser, keeping its profile; closing a closed
// identity is no error.
func (m *Manager) Close(ctx context.Context, id string) error {
	unlock := m.op(id)
	defer unlock()
	if _, err := m.row(ctx, id); err != nil {
		return err
	}
	if s := m.detach(id); s != nil {
		m.ended(ctx, s, true, closeWait)
	}
	return nil
}

// CloseAll closes every open browser (prepare-sleep, SIGTERM), each asked
// to close until ctx's deadline less Options.ServerEnd, then its server
// ended, so a deadline bounds the whole close.
func (m *Manager) CloseAll(ctx context.Context) {
	m.mu.Lock()
	all := make([]*session, 0, len(m.open))
	for id, s := range m.open {
		all = append(all, s)
		delete(m.open, id)
	}
	m.mu.Unlock()
	wait := m.closeWait(ctx)
	var wg sync.WaitGroup
	for _, s := range all {
		wg.Add(1)
		go func() { defer wg.Done(); m.ended(ctx, s, true, wait) }()
	}
	wg.Wait()
}

// Delete closes an identity and removes it with its directory.
func (m *Manager) Delete(ctx context.Context, id string) error {
	unlock := m.op(id)
	defer unlock()
	r, err := m.row(ctx, id)
	if err != nil {
		return err
	}
	if s := m.detach(id); s != nil {
		m.ended(ctx, s, true, closeWait)
	}
	if m.o.Remove != nil {
		if err := m.o.Remove(ctx, m.Dir(id)); err != nil {
			return fmt.Errorf("remove the profile of browser identity %s: %w", id, err)
		}
	}
	err = m.o.Store.Write(ctx, "browser-delete", func(tx *store.Tx) error {
		if _, err := tx.Exec(ctx, "DELETE FROM dots_browser_identities WHERE id = ?", id); err != nil {
			return fmt.Errorf("delete browser identity %s: %w", id, err)
		}
		_, err := tx.Emit(ctx, protocol.EventBrowserIdentityDeleted, protocol.BrowserIdentityEvent{IdentityID: id, Name: r.name})
		return err
	})
	if err == nil {
		m.mu.Lock()
		delete(m.crashed, id)
		m.mu.Unlock()
	}
	return err
}

// serverConfig is how an identity's server is started: its profile and
// output under its directory, headed on the Dot's desktop, the images of its
// answers sent, and its proxy, when it has one, named as a secret so its
// value is only in the relay's environment. A proxy with a user and password,
// which Chromium cannot give (SOCKS5 not at all, HTTP(S) not through
// @playwright/mcp, which hands it one URL), goes to the forwarder instead,
// which runs the server and gives it a proxy of its own on the loopback.
func (m *Manager) serverConfig(id string, proxy sql.NullString, extra []string) (protocol.MCPServerConfig, map[string]string, error) {
	dir := m.Dir(id)
	c := protocol.MCPServerConfig{
		Command: m.o.Command,
		Args: append(append([]string{
			"--user-data-dir", path.Join(dir, profileDirName),
			"--output-dir", path.Join(dir, outputDirName),
			// Every screenshot (a frame every few seconds while the owner
			// watches) and snapshot is also written there: the server evicts
			// the oldest beyond this size.
			"--output-max-size", outputMaxSize,
			"--viewport-size", ViewportSize,
			"--image-responses", "allow",
		}, m.o.Args...), extra...),
		Env: map[string]string{"DISPLAY": Display},
	}
	secrets := map[string]string{}
	switch {
	case proxy.Valid && proxyfwd.NeedsForwarding(proxy.String):
		if m.o.Forwarder == "" {
			return c, nil, refuse(protocol.ErrLaunchFailed, "the proxy of %s has a user and password, which Chromium cannot give, "+
				"and this computer has no forwarder for it (%s)", id, protocol.EnvAgentdBin)
		}
		c.Args = append([]string{proxyfwd.Subcommand, "--as", EnvProxy, "--", c.Command}, c.Args...)
		c.Command = m.o.Forwarder
		c.Secrets = []string{proxyfwd.EnvUpstream}
		secrets[proxyfwd.EnvUpstream] = proxy.String
	case proxy.Valid:
		c.Secrets = []string{EnvProxy}
		secrets[EnvProxy] = proxy.String
	}
	return c, secrets, nil
}

func (m *Manager) start(name string, c protocol.MCPServerConfig, secrets map[string]string) *mcphost.Server {
	values := make([]string, 0, len(secrets))
	for _, v := range secrets {
		values = append(values, v)
	}
	return mcphost.StartServer(mcphost.ServerOptions{
		Name: name, Dial: m.o.Dial(c, secrets), Secrets: values, Log: m.o.Log, Once: true,
		StartupTimeout: cmp.Or(m.o.StartupTimeout, DefaultStartupTimeout), Timeout: m.o.CallTimeout,
	})
}

// openServer starts an identity's server and opens its browser, asking again
// after a failure (LaunchRetry doubling to launchRetryMax) until
// LaunchPatience has gone by or ctx ends; the refusal says the last reason.
func (m *Manager) openServer(ctx context.Context, id string, proxy sql.NullString, extra []string) (*mcphost.Server, error) {
	wait, patience := cmp.Or(m.o.LaunchRetry, launchRetry), cmp.Or(m.o.LaunchPatience, launchPatience)
	began := time.Now()
	c, secrets, err := m.serverConfig(id, proxy, extra)
	if err != nil {
		return nil, err
	}
	for try := 1; ; try++ {
		srv := m.start("browser "+id, c, secrets)
		srv.Wait(ctx)
		why := ""
		if st := srv.Status(); st.State != protocol.MCPConnected {
			why = "did not start: " + cmp.Or(st.Error, "the launch was abandoned")
		} else if res := srv.Call(ctx, toolTabs, json.RawMessage(`{"action":"list"}`)); !res.OK {
			// The server starts its browser at its first call: listing the
			// tabs opens the window now, so a launch that fails says so here.
			why = "did not open: " + res.Text
		} else {
			return srv, nil
		}
		srv.Close()
		if ctx.Err() != nil || time.Since(began)+wait > patience {
			tries := ""
			if try > 1 {
				tries = fmt.Sprintf(" (%d tries in %s)", try, time.Since(began).Round(time.Second))
			}
			return nil, refuse(protocol.ErrLaunchFailed, "the browser of %s %s%s", id, why, tries)
		}
		m.o.Log.Info("browser launch failed; asking again", "identity", id, "try", try, "in", wait, "why", why)
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		wait = min(2*wait, launchRetryMax)
	}
}

// Launch opens an identity's browser, closing the least recently used open
// one when BrowserMaxOpen are open. It answers what the model reads.
func (m *Manager) Launch(ctx context.Context, id string) (string, error) {
	unlock := m.op(id)
	defer unlock()
	m.reap(ctx)
	r, err := m.row(ctx, id)
	if err != nil {
		return "", err
	}
	if s := m.session(id); s != nil {
		m.touch(ctx, s)
		return fmt.Sprintf("The browser of %s (%s) is already open.", r.id, r.name), nil
	}
	if m.o.Command == "" {
		return "", refuse(protocol.ErrLaunchFailed, "this computer has no browser: the engine was not given its MCP server (%s)", protocol.EnvMCPCommand)
	}
	var closed string
	victim := m.leastRecentlyUsed()
	defer func() {
		m.mu.Lock()
		m.launching--
		m.mu.Unlock()
	}()
	if victim != nil {
		m.ended(ctx, victim, true, closeWait)
		closed = fmt.Sprintf(" %s (%s) was closed to make room: at most %d browsers are open at once.", victim.id, victim.name, protocol.BrowserMaxOpen)
	}
	place, extra := m.place(ctx, id, r.proxy)
	srv, err := m.openServer(ctx, id, r.proxy, extra)
	if err != nil {
		return "", err
	}
	s := &session{id: id, name: r.name, srv: srv, busy: make(chan struct{}, 1), stop: make(chan struct{})}
	profile := path.Join(m.Dir(id), profileDirName)
	if s.proc, err = m.o.Watch(ctx, profile); err != nil {
		// The server's own end is still heard; only a browser that dies
		// under a living server would go unnoticed.
		m.o.Log.Warn("the browser's process is not watched", "identity", id, "err", err)
	}
	m.mu.Lock()
	m.open[id] = s
	delete(m.crashed, id)
	m.tools = srv.Status().Tools
	m.instructions = srv.Status().Instructions
	m.mu.Unlock()
	m.watch(s)
	m.touch(ctx, s)
	err = m.o.Store.Write(ctx, "browser-launched", func(tx *store.Tx) error {
		ev := protocol.BrowserIdentityEvent{IdentityID: id, Name: r.name}
		if place.TimeZone != "" {
			ev.TimeZone = &place.TimeZone
		}
		if place.Locale != "" {
			ev.Locale = &place.Locale
		}
		_, err := tx.Emit(ctx, protocol.EventBrowserIdentityLaunch, ev)
		return err
	})
	if err != nil {
		return "", err
	}
	m.o.Log.Info("browser launched", "identity", id, "timezone", place.TimeZone, "locale", place.Locale, "unplaced", place.Why)
	return fmt.Sprintf("The browser of %s (%s) is open%s; act on it with the page tools and identity_id %q.%s", id, r.name, placeText(place), id, closed), nil
}

// placeText is what the model reads of where the browser appears to be.
func placeText(p exitplace.Place) string {
	switch {
	case p.TimeZone != "" && p.Locale != "":
		return fmt.Sprintf(" (its time zone %s and locale %s follow its exit)", p.TimeZone, p.Locale)
	case p.Locale != "":
		return fmt.Sprintf(" (its locale %s follows its exit; the time zone is the computer's: %s)", p.Locale, p.Why)
	case p.Why != "":
		return " (with the computer's time zone and locale: " + p.Why + ")"
	}
	return ""
}

// place learns where the identity's browser meets the internet and writes
// the server's configuration file with the exit's time zone and locale; it
// returns the place and the server's arguments that name the file. A place
// that cannot be told, or a file that cannot be written, leaves the browser
// with the computer's time zone and locale: never a failed launch.
func (m *Manager) place(ctx context.Context, id string, proxy sql.NullString) (exitplace.Place, []string) {
	if m.o.Place == nil || m.o.ConfigDir == "" {
		return exitplace.Place{}, nil
	}
	p := m.o.Place(ctx, proxy.String)
	file := path.Join(m.o.ConfigDir, id+".json")
	if !p.Placed() {
		_ = os.Remove(file)
		return p, nil
	}
	contextOptions := map[string]string{}
	if p.TimeZone != "" {
		contextOptions["timezoneId"] = p.TimeZone
	}
	if p.Locale != "" {
		contextOptions["locale"] = p.Locale
	}
	b, _ := json.Marshal(map[string]any{"browser": map[string]any{"contextOptions": contextOptions}})
	err := os.MkdirAll(m.o.ConfigDir, 0o755)
	if err == nil {
		// Read by the server as dot; it holds no secret.
		err = os.WriteFile(file, b, 0o644)
	}
	if err != nil {
		m.o.Log.Warn("the browser's place is not given to it", "identity", id, "err", err)
		return exitplace.Place{Why: "its configuration could not be written: " + err.Error()}, nil
	}
	return p, []string{"--config", file}
}

// leastRecentlyUsed takes a place for a launch and detaches the open
// session used least recently when no room is left for it.
func (m *Manager) leastRecentlyUsed() *session {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.launching++
	if len(m.open)+m.launching <= protocol.BrowserMaxOpen || len(m.open) == 0 {
		return nil
	}
	var lru *session
	for _, s := range m.open {
		if lru == nil || s.used.Before(lru.used) {
			lru = s
		}
	}
	delete(m.open, lru.id)
	return lru
}

// touch is a use of the identity: it moves it up the LRU order and records
// last_used_ms.
func (m *Manager) touch(ctx context.Context, s *session) {
	m.mu.Lock()
	s.used = time.Now()
	m.mu.Unlock()
	err := m.o.Store.Write(ctx, "browser-used", func(tx *store.Tx) error {
		_, err := tx.Exec(ctx, "UPDATE dots_browser_identities SET last_used_ms = ? WHERE id = ?", tx.Now().UnixMilli(), s.id)
		return err
	})
	if err != nil {
		m.o.Log.Warn("record the use of a browser identity", "identity", s.id, "err", err)
	}
}

// Result is a page tool's outcome for the model.
type Result struct {
	Text string
	OK   bool
	// ImageURLs are the images the model is shown (data: URLs, never
	// stored); Text holds their placeholders.
	ImageURLs []string
}

// Call runs a page tool on the open identity args[identity_id] names. The
// identity is never launched by it (ref 6): the permission to launch decides
// that alone.
func (m *Manager) Call(ctx context.Context, tool string, args map[string]any) Result {
	id, _ := args[tools.BrowserIdentityArg].(string)
	m.reap(ctx)
	s := m.session(id)
	if s == nil {
		if _, err := m.row(ctx, id); err != nil {
			return Result{Text: err.Error() + "."}
		}
		if why := m.crashedWhy(id); why != "" {
			return Result{Text: crashedText(id, why)}
		}
		return Result{Text: notOpenText}
	}
	if u, ok := args["url"].(string); ok && !webURL(u) {
		return Result{Text: fmt.Sprintf("%s opens http:// and https:// pages only; the call did not reach the browser.", tool)}
	}
	rest := make(map[string]any, len(args))
	for k, v := range args {
		if k != tools.BrowserIdentityArg {
			rest[k] = v
		}
	}
	raw, err := json.Marshal(rest)
	if err != nil {
		return Result{Text: fmt.Sprintf("the arguments of %s could not be encoded: %v", tool, err)}
	}
	select {
	case s.busy <- struct{}{}:
	case <-ctx.Done():
		return Result{Text: "the call was stopped while it waited for the browser"}
	}
	m.touch(ctx, s)
	res := s.srv.Call(ctx, tool, raw)
	<-s.busy
	why := m.gone(s)
	if why == "" && res.Gone {
		why = "its browser's server ended"
	}
	if why != "" {
		// The browser or its server went away under the call: what the
		// server answered is of a browser that is gone (or of one it
		// launched again, blank), so the model is told the browser crashed
		// and launches it again if it wants to.
		m.crash(ctx, s, why)
		return Result{Text: crashedText(id, cmp.Or(m.crashedWhy(id), why))}
	}
	text, urls := images.Attach(res.Text, res.Images)
	return Result{Text: text, OK: res.OK, ImageURLs: urls}
}

func webURL(raw string) bool {
	u, err := url.Parse(strings.TrimSpace(raw))
	return err == nil && (strings.EqualFold(u.Scheme, "http") || strings.EqualFold(u.Scheme, "https"))
}

// Frame is one JPEG of an identity's page for the owner's view. It is no
// use of the identity: it does not move it in the LRU order, does not touch
// last_used_ms, never reopens a browser, and waits for a call in flight at
// most FrameWait.
func (m *Manager) Frame(ctx context.Context, id string) ([]byte, error) {
	if _, err := m.row(ctx, id); err != nil {
		return nil, err
	}
	m.reap(ctx)
	s := m.session(id)
	if s == nil {
		if why := m.crashedWhy(id); why != "" {
			return nil, refuse(protocol.ErrCrashed, "%s", crashedText(id, why))
		}
		return nil, refuse(protocol.ErrNotOpen, "browser identity %s is not open", id)
	}
	t := time.NewTimer(m.o.FrameWait)
	defer t.Stop()
	select {
	case s.busy <- struct{}{}:
	case <-t.C:
		return nil, refuse(protocol.ErrBusy, "a call of the Dot has held browser identity %s for longer than %s", id, m.o.FrameWait)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	res := s.srv.Call(ctx, toolScreenshot, json.RawMessage(`{"type":"jpeg"}`))
	<-s.busy
	why := m.gone(s)
	if why == "" && res.Gone {
		why = "its browser's server ended"
	}
	if why != "" {
		m.crash(ctx, s, why)
		return nil, refuse(protocol.ErrCrashed, "%s", crashedText(id, cmp.Or(m.crashedWhy(id), why)))
	}
	if !res.OK || len(res.Images) == 0 {
		return nil, refuse(protocol.ErrFrameFailed, "the browser of %s gave no frame: %s", id, res.Text)
	}
	data := res.Images[0].Data
	if len(data) < 3 || data[0] != 0xFF || data[1] != 0xD8 || data[2] != 0xFF {
		return nil, refuse(protocol.ErrFrameFailed, "the browser of %s sent a frame that is not a JPEG", id)
	}
	return data, nil
}

// Probe reads the server's tools once, with a profile kept in memory only,
// so the page tools are offered before any identity is open. A launch reads
// them again from the server it starts.
func (m *Manager) Probe(ctx context.Context) error {
	if m.o.Command == "" {
		return nil
	}
	c := protocol.MCPServerConfig{Command: m.o.Command, Args: append([]string{"--isolated"}, m.o.Args...)}
	srv := m.start("browser tools", c, nil)
	defer srv.Close()
	srv.Wait(ctx)
	st := srv.Status()
	if st.State != protocol.MCPConnected {
		return fmt.Errorf("the browser's MCP server did not list its tools: %s", st.Error)
	}
	m.mu.Lock()
	if m.tools == nil {
		m.tools = st.Tools
	}
	if m.instructions == "" {
		m.instructions = st.Instructions
	}
	m.mu.Unlock()
	return nil
}

// Instructions are what the browser's server said at initialize, read by
// Probe and again by every launch, for the system prompt (ref 8.3).
func (m *Manager) Instructions() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.instructions
}

// Tools are the page tools the model is offered: the server's own that
// Offered lets through, each with identity_id added to its input schema.
func (m *Manager) Tools() []mcphost.Tool {
	m.mu.Lock()
	listed := m.tools
	m.mu.Unlock()
	var out []mcphost.Tool
	for _, t := range listed {
		if !m.o.Offered(t.Name) {
			continue
		}
		schema, err := withIdentity(t.InputSchema)
		if err != nil {
			m.o.Log.Warn("a browser tool's schema does not read", "tool", t.Name, "err", err)
			continue
		}
		t.InputSchema = schema
		out = append(out, t)
	}
	return out
}

func withIdentity(raw json.RawMessage) (json.RawMessage, error) {
	var sch map[string]any
	if err := json.Unmarshal(raw, &sch); err != nil {
		return nil, err
	}
	if sch == nil {
		sch = map[string]any{}
	}
	sch["type"] = "object"
	props, _ := sch["properties"].(map[string]any)
	if props == nil {
		props = map[string]any{}
	}
	props[tools.BrowserIdentityArg] = map[string]any{"type": "string", "description": "The open browser identity to act on (browser_identity_launch opens one)."}
	sch["properties"] = props
	req, _ := sch["required"].([]any)
	sch["required"] = append([]any{tools.BrowserIdentityArg}, req...)
	return json.Marshal(sch)
}

// Validate checks a page tool's arguments against the server's schema with
// identity_id added, before the gate sees the call.
func (m *Manager) Validate(name string, raw json.RawMessage) (map[string]any, error) {
	var tool *mcphost.Tool
	for _, t := range m.Tools() {
		if t.Name == name {
			tool = &t
			break
		}
	}
	if tool == nil {
		return nil, fmt.Errorf("there is no browser tool named %q", name)
	}
	if len(raw) == 0 || string(raw) == "null" {
		raw = json.RawMessage("{}")
	}
	var args map[string]any
	if err := json.Unmarshal(raw, &args); err != nil || args == nil {
		return nil, fmt.Errorf("the arguments of %s are not a JSON object", name)
	}
	var sch jsonschema.Schema
	if err := json.Unmarshal(tool.InputSchema, &sch); err == nil {
		if rs, err := sch.Resolve(nil); err == nil {
			if err := rs.Validate(args); err != nil {
				return nil, fmt.Errorf("invalid arguments for %s: %v", name, err)
			}
		}
	}
	return args, nil
}

// IdentityTool runs one of the table's browser_identity_* tools; the
// routes and the tools share every path above.
func (m *Manager) IdentityTool(ctx context.Context, name string, args map[string]any) Result {
	id, _ := args[tools.BrowserIdentityArg].(string)
	answer := func(text string, err error) Result {
		var be *Error
		switch {
		case errors.As(err, &be):
			return Result{Text: be.Message + "."}
		case err != nil:
			return Result{Text: fmt.Sprintf("%s failed: %v.", name, err)}
		}
		return Result{Text: text, OK: true}
	}
	switch name {
	case "browser_identity_list":
		list, err := m.List(ctx)
		if err != nil {
			return answer("", err)
		}
		type item struct {
			ID       string `json:"identity_id"`
			Name     string `json:"name"`
			Status   string `json:"status"`
			HasProxy bool   `json:"has_proxy"`
			LastUsed string `json:"last_used,omitempty"`
		}
		out := struct {
			Identities    []item `json:"identities"`
			MaxOpen       int    `json:"max_open"`
			MaxIdentities int    `json:"max_identities"`
		}{Identities: []item{}, MaxOpen: protocol.BrowserMaxOpen, MaxIdentities: protocol.BrowserMaxIdentities}
		for _, bi := range list {
			it := item{ID: bi.ID, Name: bi.Name, Status: "available", HasProxy: bi.HasProxy}
			if bi.Open {
				it.Status = "open"
			} else if m.crashedWhy(bi.ID) != "" {
				it.Status = "crashed"
			}
			if bi.LastUsedAtMS != nil {
				it.LastUsed = time.UnixMilli(*bi.LastUsedAtMS).UTC().Format(time.RFC3339)
			}
			out.Identities = append(out.Identities, it)
		}
		b, _ := json.MarshalIndent(out, "", "  ")
		return answer(string(b), nil)
	case "browser_identity_create":
		n, _ := args["name"].(string)
		var proxy *string
		if p, ok := args["proxy"].(string); ok {
			proxy = &p
		}
		bi, err := m.Create(ctx, n, proxy)
		return answer(fmt.Sprintf("Created browser identity %s (%s), closed; browser_identity_launch opens it.", bi.ID, bi.Name), err)
	case "browser_identity_delete":
		return answer(fmt.Sprintf("Deleted browser identity %s with its profile.", id), m.Delete(ctx, id))
	case "browser_identity_launch":
		text, err := m.Launch(ctx, id)
		return answer(text, err)
	case "browser_identity_close":
		return answer(fmt.Sprintf("Closed the browser of %s; its profile is kept.", id), m.Close(ctx, id))
	}
	return Result{Text: fmt.Sprintf("There is no browser identity tool named %q.", name)}
}

// txQuerier reads inside a store transaction.
type txQuerier struct{ tx *store.Tx }

func (t txQuerier) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	return t.tx.Query(ctx, q, args...)
}

// RelayRemover deletes a directory of the Dot's home as dot, through the same
// relay that runs the browser (dot-agentd has no delete route): the profile
// is dot's, written by the browser as dot, and the engine's own user has no
// right to it.
func RelayRemover(l mcphost.Launcher) func(ctx context.Context, dir string) error {
	return func(ctx context.Context, dir string) error {
		cmd, err := l.RelayCommand(protocol.MCPServerConfig{Command: "rm", Args: []string{"-rf", "--", dir}}, nil)
		if err != nil {
			return err
		}
		cmd.Stdin = nil
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("rm -rf %s as dot: %v: %s", dir, err, strings.TrimSpace(string(out)))
		}
		return nil
	}
}

// Proxies are every proxy an identity ever had, for masking: a proxy the
// person gave in a chat passes through the model's call of
// browser_identity_create, and the conversation files the model and the Files
// tab read must not keep it, not even after the identity is deleted (ref
// 8.6: never forgotten). Each proxy comes with its password alone, which a
// person or the model may write apart from the URL. The proxies of
// identities made before dots_masked existed are gathered into it by the
// first call; the later ones only read it (an identity's proxy goes into
// dots_masked in the transaction that makes it), since this runs after
// every turn and a write transaction there cost the turn for nothing.
func (m *Manager) Proxies(ctx context.Context) []string {
	m.maskedMu.Lock()
	if m.maskedValid && m.maskedAt == m.maskedVersion {
		out := slices.Clone(m.masked)
		m.maskedMu.Unlock()
		return out
	}
	version := m.maskedVersion
	m.maskedMu.Unlock()
	var proxies []string
	read := func(q interface {
		QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
	}) error {
		proxies = nil
		rs, err := q.QueryContext(ctx, "SELECT value FROM dots_masked")
		if err != nil {
			return fmt.Errorf("read proxies for masking: %w", err)
		}
		defer rs.Close()
		for rs.Next() {
			var v string
			if err := rs.Scan(&v); err != nil {
				return err
			}
			proxies = append(proxies, v)
		}
		return rs.Err()
	}
	var err error
	if m.gathered.Load() {
		err = m.o.Store.Read(ctx, func(q store.Querier) error { return read(q) })
	} else {
		err = m.o.Store.Write(ctx, "masked-proxies", func(tx *store.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO dots_masked(value) SELECT proxy FROM dots_browser_identities
			WHERE proxy IS NOT NULL AND proxy != '' ON CONFLICT DO NOTHING`); err != nil {
				return fmt.Errorf("gather proxies for masking: %w", err)
			}
			return read(txQuerier{tx})
		})
		if err == nil {
			m.gathered.Store(true)
		}
	}
	if err != nil {
		m.o.Log.Warn("read the proxies to mask", "err", err)
		return nil
	}
	var out []string
	for _, p := range proxies {
		out = append(out, p)
		if u, err := url.Parse(p); err == nil && u.User != nil {
			if pw, ok := u.User.Password(); ok && pw != "" {
				out = append(out, pw)
			}
		}
	}
	m.maskedMu.Lock()
	if m.maskedVersion == version {
		m.masked, m.maskedAt, m.maskedValid = slices.Clone(out), version, true
	}
	m.maskedMu.Unlock()
	return out
}
