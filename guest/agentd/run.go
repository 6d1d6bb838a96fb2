package agentd

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/invisible-dots/invisible-dots/guest/door"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// Options is how the daemon is started (dot-agentd's flags).
type Options struct {
	// Listen is the TCP address of the host's door (":1024").
	Listen string
	// Socket is the engine's unix socket; empty serves none.
	Socket string
	// ConfigPath is the GuestConfig JSON holding the token.
	ConfigPath string
	// RunAs names the Dot's user; "" is the development mode.
	RunAs string
	// Home is the Dot's home.
	Home string
	Log  *slog.Logger
	// Ready, when set, is called with the bound addresses once both
	// listeners accept.
	Ready func(tcp net.Addr)
	// MaxConns caps the connections the TCP door holds open and
	// MaxLocalConns the engine's socket's (0: DefaultMaxConns and
	// DefaultMaxLocalConns). At the cap the oldest connection not serving an
	// authenticated request is closed (door.Limit).
	MaxConns, MaxLocalConns int
	// IdleTimeout replaces the default IdleTimeout when set (tests).
	IdleTimeout time.Duration
	// configure, for tests, edits the Config before the server is made.
	configure func(*Config)
}

// The doors' bounds. The caps stay well under the daemon's file limit (256
// where the unit does not raise it), so a flood of connections never makes
// the daemon fail to open a file or the engine's socket.
const (
	DefaultMaxConns      = 128
	DefaultMaxLocalConns = 64
	// HeaderTimeout bounds a request's head; BodyTimeout its body (an upload
	// moves it to UploadTimeout); IdleTimeout a kept-alive connection with
	// no request.
	HeaderTimeout = 5 * time.Second
	BodyTimeout   = 30 * time.Second
	UploadTimeout = 10 * time.Minute
	IdleTimeout   = 30 * time.Second
)

// newHTTPServer is one door's server over its limited listener.
func newHTTPServer(h http.Handler, ln *door.Listener, idle time.Duration) *http.Server {
	hs := &http.Server{Handler: h, ReadHeaderTimeout: HeaderTimeout, IdleTimeout: cmp.Or(idle, IdleTimeout), MaxHeaderBytes: 64 << 10}
	ln.Configure(hs)
	return hs
}

// Run serves until ctx ends. It empties the ambient capability set first,
// whatever RunAs says, and refuses to act as another user without the
// capabilities that takes.
func Run(ctx context.Context, o Options) error {
	log := o.Log
	if log == nil {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	if err := clearAmbient(); err != nil {
		return err
	}
	cfg := DefaultConfig()
	cfg.Log = log
	if o.Home != "" {
		cfg.Home = o.Home
	}
	if o.RunAs == "" {
		log.Warn("development mode: --run-as is empty, so every command and file operation runs as the daemon's own user", "uid", os.Getuid())
	} else {
		id, err := LookupIdentity(o.RunAs)
		if err != nil {
			return err
		}
		if os.Geteuid() != 0 {
			missing, err := missingCaps()
			if err != nil {
				return err
			}
			if len(missing) > 0 {
				return fmt.Errorf("acting as %s needs the capabilities %v, which this process lacks: start it from its unit (AmbientCapabilities=CAP_SETUID CAP_SETGID CAP_KILL) or with --run-as \"\" for development", o.RunAs, missing)
			}
		}
		cfg.RunAs = id
		log.Info("work runs as", "user", id.Name, "uid", id.UID, "gid", id.GID, "groups", id.Groups)
	}
	gc, err := ReadGuestConfig(o.ConfigPath)
	if err != nil {
		return err
	}
	cfg.Token = gc.Token
	if o.configure != nil {
		o.configure(&cfg)
	}
	srv, err := New(cfg)
	if err != nil {
		return err
	}

	rawTCP, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s (another dot-agentd running?): %w", o.Listen, err)
	}
	ln := door.Limit(rawTCP, cmp.Or(o.MaxConns, DefaultMaxConns))
	servers := []*http.Server{newHTTPServer(srv.TCPHandler(), ln, o.IdleTimeout)}
	listeners := []net.Listener{ln}
	if o.Socket != "" {
		rawUnix, err := listenUnix(o.Socket)
		if err != nil {
			ln.Close()
			return err
		}
		sl := door.Limit(rawUnix, cmp.Or(o.MaxLocalConns, DefaultMaxLocalConns))
		servers = append(servers, newHTTPServer(srv.LocalHandler(), sl, o.IdleTimeout))
		listeners = append(listeners, sl)
	}
	log.Info("dot-agentd serving", "dot", gc.DotID, "tcp", ln.Addr().String(), "socket", o.Socket, "home", cfg.Home)
	if o.Ready != nil {
		o.Ready(ln.Addr())
	}
	errc := make(chan error, len(servers))
	for i := range servers {
		go func() { errc <- servers[i].Serve(listeners[i]) }()
	}
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	shutCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, s := range servers {
		_ = s.Shutdown(shutCtx)
	}
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}

// ReadGuestConfig reads and checks the Dot's guest config. Its errors never
// carry the token.
func ReadGuestConfig(path string) (protocol.GuestConfig, error) {
	var gc protocol.GuestConfig
	b, err := os.ReadFile(path)
	if err != nil {
		return gc, fmt.Errorf("read the Dot's config (the seed writes %s): %w", path, err)
	}
	if err := json.Unmarshal(b, &gc); err != nil {
		return gc, fmt.Errorf("the Dot's config %s is not valid JSON", path)
	}
	if err := gc.Validate(); err != nil {
		return gc, fmt.Errorf("the Dot's config %s: %w", path, err)
	}
	return gc, nil
}

// listenUnix makes the engine's socket: a stale one is removed, and the
// socket is 0660 so the group its directory gives it (setgid, ref 4.2) can
// connect.
func listenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("make the socket's directory: %w", err)
	}
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		_ = os.Remove(path)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o660); err != nil {
		ln.Close()
		return nil, fmt.Errorf("chmod %s: %w", path, err)
	}
	return ln, nil
}

// ListenAddr is the default TCP address.
var ListenAddr = ":" + strconv.Itoa(protocol.AgentdPort)
