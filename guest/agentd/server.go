// Package agentd is dot-agentd (ref 4.1, 5.2): the daemon inside a Dot's
// computer that serves the host on TCP port 1024 (with the Dot's token) and
// the engine on a local unix socket, and does every piece of the model's work
// as the Dot's user.
package agentd

import (
	"bufio"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/invisible-dots/invisible-dots/guest/door"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// Config is what one dot-agentd serves with.
type Config struct {
	// Token authorizes every TCP request but the proof. Never logged.
	Token string
	// Home is the Dot's home (DOT_HOME, default /home/dot): relative paths
	// resolve against it and the TCP file routes are confined to it.
	Home string
	// RunAs is the user every command and file operation acts as; nil is the
	// development mode (the daemon's own user).
	RunAs *Identity
	// AgentSocket is the engine's API, the target of /v1/agent/* and of the
	// agent part of /v1/health.
	AgentSocket string
	// Display is the X display screenshots are taken of and commands see;
	// X11SocketDir holds its socket (X<n>), whose presence says it exists.
	Display      string
	X11SocketDir string
	// ScreenshotArgv writes a PNG of Display to its standard output; it runs
	// as RunAs.
	ScreenshotArgv []string
	// PoweroffArgv is started, detached, as the daemon itself.
	PoweroffArgv []string
	// Shell runs POST /v1/exec commands as Shell -lc COMMAND.
	Shell string
	// RuntimeManifest is the mounted runtime ISO's manifest.json: the
	// version in it is what GET /v1/health reports as runtime_version.
	RuntimeManifest string
	Log             *slog.Logger
}

// DefaultConfig is the product's configuration before the token, the user
// and the home are filled in.
func DefaultConfig() Config {
	return Config{
		Home:            protocol.DefaultDotHome,
		AgentSocket:     protocol.AgentSocketPath,
		Display:         protocol.DefaultDisplay,
		X11SocketDir:    "/tmp/.X11-unix",
		ScreenshotArgv:  []string{"/usr/bin/import", "-silent", "-window", "root", "-display", protocol.DefaultDisplay, "png:-"},
		PoweroffArgv:    protocol.PoweroffArgv,
		Shell:           protocol.ExecShell,
		RuntimeManifest: protocol.RuntimeMountPoint + "/" + protocol.RuntimeManifestFile,
	}
}

// Server serves the routes of ref 5.2.
type Server struct {
	cfg Config
}

// New checks cfg and returns a server. It does not touch the network.
func New(cfg Config) (*Server, error) {
	if cfg.Home == "" || !filepath.IsAbs(cfg.Home) {
		return nil, fmt.Errorf("the Dot's home %q must be an absolute path (set %s)", cfg.Home, protocol.DotHomeEnv)
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	if cfg.Shell == "" {
		cfg.Shell = protocol.ExecShell
	}
	return &Server{cfg: cfg}, nil
}

func (s *Server) log() *slog.Logger { return s.cfg.Log }

// TCPHandler is the host's door: every route, the token on all but the proof,
// the file routes confined to home.
func (s *Server) TCPHandler() http.Handler {
	files := fileAccess{home: s.cfg.Home, confined: true}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+protocol.PathProof, s.handleProof)
	authed := http.NewServeMux()
	s.commonRoutes(authed, files)
	authed.HandleFunc("POST "+protocol.PathPoweroff, s.handlePoweroff)
	authed.Handle(protocol.PathAgentPrefix, s.agentProxy())
	authed.HandleFunc("/", noRoute(mux, authed))
	mux.Handle("/", s.requireToken(authed))
	return s.logged("tcp", door.ReadBounded(mux, BodyTimeout))
}

// LocalHandler is the engine's socket: no token (its directory says who can
// connect), file routes unconfined, no proof, no poweroff, no proxy, and
// POST /v1/proc.
func (s *Server) LocalHandler() http.Handler {
	files := fileAccess{home: s.cfg.Home, confined: false}
	mux := http.NewServeMux()
	s.commonRoutes(mux, files)
	mux.HandleFunc("POST "+protocol.PathProc, s.handleProc)
	mux.HandleFunc("/", noRoute(mux))
	return s.logged("local", door.Trusting(door.ReadBounded(mux, BodyTimeout)))
}

func (s *Server) commonRoutes(mux *http.ServeMux, files fileAccess) {
	mux.HandleFunc("GET "+protocol.PathHealth, s.handleHealth)
	mux.HandleFunc("GET "+protocol.PathSystem, s.handleSystem)
	mux.HandleFunc("POST "+protocol.PathExec, s.handleExec)
	mux.HandleFunc("GET "+protocol.PathFiles, s.handleFileGet(files))
	mux.HandleFunc("PUT "+protocol.PathFiles, s.handleFilePut(files))
	mux.HandleFunc("GET "+protocol.PathFilesList, s.handleFileList(files))
	mux.HandleFunc("GET "+protocol.PathScreenshot, s.handleScreenshot)
}

// noRoute answers a request no route takes: 405 with Allow when the path is
// served with other methods by one of muxes, 404 otherwise.
func noRoute(muxes ...*http.ServeMux) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var allow []string
		for _, m := range muxes {
			allow = append(allow, door.Allowed(m, r, "/")...)
		}
		if len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			writeError(w, errorf(http.StatusMethodNotAllowed, protocol.ErrMethodNotAllowed, "%s is served with %s, not %s", r.URL.Path, strings.Join(allow, ", "), r.Method))
			return
		}
		writeError(w, errorf(http.StatusNotFound, protocol.ErrNotFound, "no route %s %s", r.Method, r.URL.Path))
	}
}

// logged logs a request's method, path and status, never a body, a query
// (a path may be private) or a header (the token).
func (s *Server) logged(listener string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		start := time.Now()
		h.ServeHTTP(rec, r)
		s.log().Info("request", "listener", listener, "method", r.Method, "path", r.URL.Path, "status", rec.status, "ms", time.Since(start).Milliseconds())
	})
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach Flush.
func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// Hijack records the 101 the handler writes itself on the taken connection.
func (r *statusRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, rw, err := http.NewResponseController(r.ResponseWriter).Hijack()
	if err == nil {
		r.status = http.StatusSwitchingProtocols
	}
	return c, rw, err
}

func (s *Server) requireToken(h http.Handler) http.Handler {
	want := []byte("Bearer " + s.cfg.Token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := []byte(r.Header.Get("Authorization"))
		if s.cfg.Token == "" || subtle.ConstantTimeCompare(got, want) != 1 {
			// A connection that has not shown the token keeps nothing: it is
			// closed once answered, so it cannot be held open for free.
			w.Header().Set("Connection", "close")
			writeError(w, errorf(http.StatusUnauthorized, protocol.ErrUnauthorized, "a valid bearer token is required"))
			return
		}
		door.Trust(r.Context())
		h.ServeHTTP(w, r)
	})
}

var nonceRE = regexp.MustCompile(fmt.Sprintf(`^[0-9a-f]{%d,%d}$`, protocol.ProofNonceMinHex, protocol.ProofNonceMaxHex))

func (s *Server) handleProof(w http.ResponseWriter, r *http.Request) {
	// The connection stays open: the host sends its requests with the token
	// on the connection it proved (guestclient). Until one comes it is
	// unauthenticated, so the first closed at the cap (door.Limit), and an
	// idle one is closed after IdleTimeout.
	nonce := r.URL.Query().Get(protocol.QueryNonce)
	if !nonceRE.MatchString(nonce) {
		writeError(w, errorf(http.StatusBadRequest, protocol.ErrBadNonce, "nonce must be %d to %d lowercase hex characters", protocol.ProofNonceMinHex, protocol.ProofNonceMaxHex))
		return
	}
	writeJSON(w, http.StatusOK, protocol.ProofResponse{Proof: protocol.ComputeProof(s.cfg.Token, nonce)})
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	resp := protocol.HealthResponse{Agentd: protocol.AgentdOK, Agent: json.RawMessage("null")}
	if up, err := uptimeSeconds(); err == nil {
		resp.UptimeS = up
	}
	if agent, err := s.agentHealth(r.Context()); err == nil {
		resp.Agent = agent
	}
	resp.RuntimeVersion = s.runtimeVersion()
	writeJSON(w, http.StatusOK, resp)
}

// runtimeVersion is the version in the runtime ISO's manifest, read at each
// ask (a small file on a read-only disk): empty when the ISO is not mounted
// or its manifest does not parse, which the host shows as not reported.
func (s *Server) runtimeVersion() string {
	if s.cfg.RuntimeManifest == "" {
		return ""
	}
	b, err := os.ReadFile(s.cfg.RuntimeManifest)
	if err != nil {
		return ""
	}
	var m protocol.RuntimeContents
	if json.Unmarshal(b, &m) != nil {
		return ""
	}
	return m.Version
}

// agentHealth asks the engine's GET /health; its answer is passed on as is.
func (s *Server) agentHealth(ctx context.Context) (json.RawMessage, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://agent/health", nil)
	if err != nil {
		return nil, err
	}
	resp, err := s.agentClient().Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var raw json.RawMessage
	if err := json.NewDecoder(http.MaxBytesReader(nil, resp.Body, 1<<20)).Decode(&raw); err != nil {
		return nil, fmt.Errorf("engine health answer does not parse: %w", err)
	}
	return raw, nil
}

func (s *Server) agentClient() *http.Client {
	return &http.Client{Transport: s.agentTransport()}
}

func (s *Server) agentTransport() *http.Transport {
	sock := s.cfg.AgentSocket
	return &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
		DisableKeepAlives: true,
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, err error) {
	var ae *apiError
	if !errors.As(err, &ae) {
		ae = errorf(http.StatusInternalServerError, protocol.ErrInternal, "%v", err)
	}
	writeJSON(w, ae.status, protocol.ErrorResponse{Error: ae.code, Message: ae.msg})
}

// decodeBody reads one JSON value of at most limit bytes (protocol.DecodeJSON:
// no unknown field, nothing after it), answered as invalid_request, or
// too_large for a body over the limit.
func decodeBody(r *http.Request, limit int64, v any) error {
	if err := protocol.DecodeJSON(r.Body, limit, v); err != nil {
		var de *protocol.DecodeError
		if errors.As(err, &de) && de.Problem == protocol.BodyTooLarge {
			return errorf(de.Status(), protocol.ErrTooLarge, "%s: %v", r.URL.Path, err)
		}
		return errorf(http.StatusBadRequest, protocol.ErrInvalidRequest, "%s: %v", r.URL.Path, err)
	}
	return nil
}

// resolveCwd makes a working directory absolute against home.
func (s *Server) resolveCwd(cwd string) string {
	if cwd == "" {
		return s.cfg.Home
	}
	if !filepath.IsAbs(cwd) {
		return filepath.Join(s.cfg.Home, cwd)
	}
	return filepath.Clean(cwd)
}

// checkDir answers whether dir is a directory the Dot's user can enter.
// Opening "dir/." needs search permission on dir, which is what entering
// takes (a chdir would move the whole daemon).
func (s *Server) checkDir(dir string) error {
	_, err := asUser(s.cfg.RunAs, func() (struct{}, error) {
		f, err := os.OpenFile(dir+"/.", os.O_RDONLY|syscall.O_DIRECTORY, 0)
		if err != nil {
			return struct{}{}, err
		}
		return struct{}{}, f.Close()
	})
	if err != nil {
		return errorf(http.StatusBadRequest, protocol.ErrInvalidRequest, "cwd %s is not a directory the Dot's user can enter: %v", dir, err)
	}
	return nil
}

// env is the environment of everything the daemon starts for the Dot's user
// (ref 4.1 execEnv): the daemon's own, with the account's HOME, USER,
// LOGNAME and SHELL, a PATH that puts ~/.local/bin before the system's, and
// DISPLAY; extra entries come last and win.
func (s *Server) env(extra []string) []string {
	home, name, shell := s.cfg.Home, "", "/bin/sh"
	if id := s.cfg.RunAs; id != nil {
		name, shell = id.Name, id.Shell
	} else if u := os.Getenv("USER"); u != "" {
		name = u
	}
	set := map[string]string{
		"HOME":    home,
		"USER":    name,
		"LOGNAME": name,
		"SHELL":   shell,
		"PATH":    home + "/.local/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"DISPLAY": s.cfg.Display,
	}
	var out []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if _, over := set[k]; over || k == protocol.RunAsEnv {
			continue
		}
		out = append(out, kv)
	}
	for _, k := range []string{"HOME", "USER", "LOGNAME", "SHELL", "PATH", "DISPLAY"} {
		out = append(out, k+"="+set[k])
	}
	return append(out, extra...)
}
