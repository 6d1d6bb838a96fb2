// Package webui serves the web client (ref 9.7, DESIGN 2): the embedded
// single-page app, and the API paths proxied to the API server, so the
// browser never holds a token. By default it is the machine's owner's alone:
// it adds the server's own credential, listens on a loopback address no
// guest reaches (QEMU's user network maps 10.0.2.2 to 127.0.0.1 only), and
// refuses a Host that is not a loopback name (DNS rebinding). With sign-in
// (signin.go) each person signs in with their own credential, which every
// request carries, and it may listen where others reach it, over HTTPS.
// Either way it refuses, on the API paths, what a foreign page could send: a
// cross-site Sec-Fetch-Site or a foreign Origin.
package webui

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
)

// Environment variables of the web server.
const (
	// EnvListen is the web client's host:port.
	EnvListen = "INVISIBLE_DOTS_WEB_LISTEN"
	// EnvAllowedHosts lists, comma-separated, host names besides the
	// loopback ones that the web server answers to (a name in /etc/hosts for
	// 127.0.0.2, say).
	EnvAllowedHosts = "INVISIBLE_DOTS_WEB_ALLOWED_HOSTS"
)

// ParseAllowedHosts reads EnvAllowedHosts' value.
func ParseAllowedHosts(s string) []string {
	var hosts []string
	for _, h := range strings.Split(s, ",") {
		if h = strings.ToLower(strings.TrimSpace(h)); h != "" {
			hosts = append(hosts, h)
		}
	}
	return hosts
}

// Options configure NewHandler.
type Options struct {
	// Upstream is the API server and the credential the proxy adds.
	Upstream *rest.Config
	// DotsAPI is where /dots/v1/ goes when the API server does not serve
	// it (a cluster that is not ours); nil: Upstream serves it.
	DotsAPI *rest.Config
	// Files is the app (index.html at its root).
	Files fs.FS
	// AllowedHosts are host names answered besides the loopback ones.
	AllowedHosts []string
	// Address is where the web server listens, for the words of a refusal.
	Address string
	// SignIn: people sign in with their own credentials (signin.go), and
	// the proxy never adds the server's.
	SignIn bool
	// Secure: the page is served over HTTPS (the session cookie is Secure).
	Secure bool
	Log    logr.Logger
}

type handler struct {
	api, dots    *httputil.ReverseProxy
	apiUp        *backend
	dotsUp       *backend
	files        fs.FS
	static       http.Handler
	address      string
	allowedHosts map[string]bool
	// signIn is nil when the web client acts with the server's credential.
	signIn *signIn
}

// NewHandler is the web server's handler.
func NewHandler(o Options) (http.Handler, error) {
	var in *signIn
	upstream, dotsAPI := o.Upstream, o.DotsAPI
	if o.SignIn {
		in = newSignIn(o.Upstream, o.Secure)
		// No request of the page goes out with the server's credential.
		upstream = rest.AnonymousClientConfig(o.Upstream)
		if dotsAPI != nil {
			dotsAPI = rest.AnonymousClientConfig(dotsAPI)
		}
	}
	api, apiUp, err := newProxy(upstream, "the API server", in, o.Log)
	if err != nil {
		return nil, err
	}
	dots, dotsUp := api, apiUp
	if dotsAPI != nil {
		if dots, dotsUp, err = newProxy(dotsAPI, "the Dots API", in, o.Log); err != nil {
			return nil, err
		}
	}
	h := &handler{
		signIn:       in,
		files:        o.Files,
		address:      cmpOr(o.Address, DefaultListen),
		static:       http.FileServerFS(o.Files),
		allowedHosts: map[string]bool{},
		api:          api,
		dots:         dots,
		apiUp:        apiUp,
		dotsUp:       dotsUp,
	}
	for _, name := range o.AllowedHosts {
		h.allowedHosts[strings.ToLower(name)] = true
	}
	return h, nil
}

// newProxy forwards to the server cfg names with cfg's credential alone, or,
// with sign-in, with the credential of the request's session; the backend is
// the same server and credential, for what the handler reads itself
// (LivePath).
func newProxy(cfg *rest.Config, what string, in *signIn, log logr.Logger) (*httputil.ReverseProxy, *backend, error) {
	target, err := url.Parse(cfg.Host)
	if err != nil || target.Host == "" {
		return nil, nil, fmt.Errorf("the address of %s %q is not a URL", what, cfg.Host)
	}
	transport, err := rest.TransportFor(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("make the web proxy's transport to %s: %w", what, err)
	}
	up := &backend{base: target, client: &http.Client{Transport: transport}}
	return &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = ""
			// The credential is the transport's alone; nothing the
			// browser sends may speak for someone else.
			for k := range r.Out.Header {
				if k == "Authorization" || k == "Cookie" || strings.HasPrefix(k, "Impersonate-") {
					r.Out.Header.Del(k)
				}
			}
			r.Out.Header.Del("Origin")
			r.Out.Header.Del("Referer")
			if ss := sessionOf(r.In.Context()); ss != nil {
				r.Out.Header.Set("Authorization", "Bearer "+ss.token)
			}
		},
		ModifyResponse: func(res *http.Response) error {
			// A token the API server no longer accepts (revoked, expired)
			// ends its session: the page signs in again.
			if ss := sessionOf(res.Request.Context()); ss != nil && res.StatusCode == http.StatusUnauthorized {
				in.drop(ss)
			}
			return nil
		},
		Transport: transport,
		// Watches and the event streams reach the page as they come.
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() == nil {
				log.Error(err, "web proxy: no answer", "from", what, "path", r.URL.Path)
			}
			writeError(w, http.StatusBadGateway, "api_unreachable", what+" did not answer: is invisible-dots server still running?")
		},
	}, up, nil
}

// isAPIPath says whether a path is one the proxy forwards: the Kubernetes
// API and the Dots API, but not the host agents' routes.
func isAPIPath(p string) bool {
	switch {
	case p == "/api" || strings.HasPrefix(p, "/api/"):
		return true
	case p == "/apis" || strings.HasPrefix(p, "/apis/"):
		return true
	case strings.HasPrefix(p, "/dots/v1/"):
		return !strings.HasPrefix(p, "/dots/v1/hostagent/")
	}
	return false
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.signIn == nil && !h.hostAllowed(r.Host) {
		writeError(w, http.StatusForbidden, "forbidden",
			fmt.Sprintf("the web client answers to loopback names only, not %q: open http://%s, or add the name to %s", r.Host, h.address, EnvAllowedHosts))
		return
	}
	if strings.HasPrefix(r.URL.Path, "/dots/v1/hostagent/") {
		writeError(w, http.StatusNotFound, "not_found", "the host agents' routes are not served to the web client")
		return
	}
	if r.URL.Path == SessionPath {
		if msg := crossSite(r); msg != "" {
			writeError(w, http.StatusForbidden, "forbidden", msg)
			return
		}
		if h.signIn == nil {
			if r.Method != http.MethodGet {
				writeError(w, http.StatusNotFound, "not_found", "people do not sign in here: this web client is the machine's owner's and acts with the server's credential (start the server with --web-sign-in for people's own sign-in)")
				return
			}
			writeJSON(w, http.StatusOK, SessionInfo{})
			return
		}
		h.signIn.serve(w, r)
		return
	}
	if r.URL.Path == LivePath || isAPIPath(r.URL.Path) {
		if msg := crossSite(r); msg != "" {
			writeError(w, http.StatusForbidden, "forbidden", msg)
			return
		}
		if h.signIn != nil {
			ss, why := h.signIn.lookup(r)
			if ss == nil {
				if _, err := r.Cookie(h.signIn.cookieName()); err == nil {
					h.signIn.clearCookie(w)
				}
				writeError(w, http.StatusUnauthorized, "unauthenticated", why)
				return
			}
			r = r.WithContext(context.WithValue(r.Context(), sessionKey{}, ss))
		}
	}
	if r.URL.Path == LivePath {
		h.serveLive(w, r)
		return
	}
	if isAPIPath(r.URL.Path) {
		if strings.HasPrefix(r.URL.Path, "/dots/v1/") {
			h.dots.ServeHTTP(w, r)
		} else {
			h.api.ServeHTTP(w, r)
		}
		return
	}
	h.serveFile(w, r)
}

// hostAllowed: a loopback name (localhost, any 127.x.y.z, ::1) or a listed
// one, so a DNS name rebound to this address is refused.
func (h *handler) hostAllowed(hostport string) bool {
	host := hostport
	if hst, _, err := net.SplitHostPort(hostport); err == nil {
		host = hst
	}
	host = strings.ToLower(strings.Trim(host, "[]"))
	if host == "localhost" || h.allowedHosts[host] {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// crossSite is why an API request comes from another site, or "": a browser
// marks what a foreign page sends with Sec-Fetch-Site, and with an Origin
// that is not this server's. A request with neither (curl on this machine)
// passes: it could read the token file anyway.
func crossSite(r *http.Request) string {
	switch site := r.Header.Get("Sec-Fetch-Site"); site {
	case "", "same-origin", "none":
	default:
		return fmt.Sprintf("a %s request to the API is refused: only the web client's own pages may call it", site)
	}
	if origin := r.Header.Get("Origin"); origin != "" {
		u, err := url.Parse(origin)
		if err != nil || !strings.EqualFold(u.Host, r.Host) {
			return fmt.Sprintf("a request from %q to the API is refused: only the web client's own pages may call it", origin)
		}
	}
	return ""
}

// serveFile serves the app's files, and index.html for every other path
// without an extension (the app's own addresses, /dots/ns/name/chat).
func (h *handler) serveFile(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "the web client's files are read with GET")
		return
	}
	hdr := w.Header()
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("Referrer-Policy", "no-referrer")
	hdr.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data: blob:; style-src 'self' 'unsafe-inline'; "+
		"connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
	name := strings.TrimPrefix(path.Clean(r.URL.Path), "/")
	if name != "" && name != "index.html" {
		if fi, err := fs.Stat(h.files, name); err == nil && !fi.IsDir() {
			if strings.HasPrefix(name, "assets/") {
				// Vite names them by their content.
				hdr.Set("Cache-Control", "public, max-age=31536000, immutable")
			}
			h.static.ServeHTTP(w, r)
			return
		}
		if path.Ext(name) != "" {
			writeError(w, http.StatusNotFound, "not_found", "no such file: "+name)
			return
		}
	}
	data, err := fs.ReadFile(h.files, "index.html")
	if err != nil {
		writeError(w, http.StatusInternalServerError, "internal", "the web client has no index.html")
		return
	}
	hdr.Set("Content-Type", "text/html; charset=utf-8")
	hdr.Set("Cache-Control", "no-cache")
	_, _ = w.Write(data)
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]string{"error": code, "message": msg})
}

// Server is a started web server.
type Server struct {
	srv  *http.Server
	done chan struct{}
}

// Start listens on addr at once (so a port taken is an error here) and
// serves h until Stop, over TLS when tlsConfig is not nil.
func Start(addr string, h http.Handler, tlsConfig *tls.Config, log logr.Logger) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s (%s): %w", addr, EnvListen, err)
	}
	if tlsConfig != nil {
		ln = tls.NewListener(ln, tlsConfig)
	}
	s := &Server{
		srv:  &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second},
		done: make(chan struct{}),
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error(err, "the web client's server stopped")
		}
	}()
	return s, nil
}

// Stop closes the listener and every connection: the open streams end, and
// the page reconnects to the next server.
func (s *Server) Stop(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		_ = s.srv.Close()
	}
	<-s.done
}
