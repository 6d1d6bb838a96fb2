package bench

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/invisible-dots/invisible-dots/internal/home"
)

var (
	dotsGVR       = schema.GroupVersionResource{Group: "dots.invisible.dev", Version: "v1alpha1", Resource: "dots"}
	computersGVR  = schema.GroupVersionResource{Group: "dots.invisible.dev", Version: "v1alpha1", Resource: "computers"}
	namespacesGVR = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
)

// server is one `invisible-dots server` subprocess on a home.
type server struct {
	home    home.Layout
	addr    string
	logPath string

	*child
}

// readiness is how long after exec the server could be used.
type readiness struct {
	// API is the first 200 from /readyz with the admin token: the API
	// server serves.
	API time.Duration
	// Dots is the kubeconfig written and a list of Dots answered: the CRDs are
	// established, what a person needs for `kubectl get dots`.
	Dots time.Duration
}

// startServer execs bin as `invisible-dots server --no-web` (with
// --profiling when the bench takes profiles) on home,
// listening on addr, its output appended to logPath; env is added to the
// server's environment (NAME=value).
func startServer(bin string, h home.Layout, addr, logPath string, env ...string) (*server, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open the server log: %w", err)
	}
	args := []string{"server", "--no-web"}
	if os.Getenv(envProfile) != "" {
		args = append(args, "--profiling")
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(serverEnv(h.Root, addr), env...)
	// SIGINT is the server's clean stop.
	c, err := startChild(cmd, logFile, syscall.SIGINT)
	if err != nil {
		return nil, fmt.Errorf("start the server: %w", err)
	}
	return &server{home: h, addr: addr, logPath: logPath, child: c}, nil
}

// serverEnv is the benchmark's environment without anything that would point
// the server elsewhere (another database, cluster or home), plus ours.
func serverEnv(homeDir, addr string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case name == "DATABASE_URL", name == "KUBECONFIG", strings.HasPrefix(name, "INVISIBLE_DOTS_"):
			continue
		}
		env = append(env, kv)
	}
	return append(env, home.EnvHome+"="+homeDir, "INVISIBLE_DOTS_LISTEN="+addr)
}

// waitReady polls until the API answers /readyz and a list of Dots succeeds,
// and says how long after exec each happened. Polling every 20 ms bounds how
// late a figure can be.
func (s *server) waitReady(ctx context.Context, timeout time.Duration) (readiness, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var (
		r       readiness
		probe   *http.Client
		token   string
		dots    dynamic.Interface
		lastErr error
	)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for r.API == 0 || r.Dots == 0 {
		select {
		case <-s.exited:
			return r, fmt.Errorf("the server exited before it was ready (%v); its log %s ends:\n%s", s.waitErr, s.logPath, s.logTail(30))
		case <-ctx.Done():
			return r, fmt.Errorf("the server was not ready within %s (last: %v); its log %s ends:\n%s", timeout, lastErr, s.logPath, s.logTail(30))
		case <-tick.C:
		}
		if r.API == 0 {
			if probe == nil {
				probe, token, lastErr = s.probeClient()
			}
			if probe != nil {
				if lastErr = readyz(ctx, probe, s.addr, token); lastErr == nil {
					r.API = time.Since(s.started)
				}
			}
		}
		if r.Dots == 0 {
			if dots == nil {
				if _, err := os.Stat(s.home.Kubeconfig()); err == nil {
					dots, lastErr = s.client()
				}
			}
			if dots != nil {
				attempt, cancelAttempt := context.WithTimeout(ctx, 2*time.Second)
				_, err := dots.Resource(dotsGVR).Namespace("default").List(attempt, metav1.ListOptions{Limit: 1})
				cancelAttempt()
				if lastErr = err; err == nil {
					r.Dots = time.Since(s.started)
				}
			}
		}
	}
	return r, nil
}

// probeClient trusts the home's CA and carries the admin token, once the
// server has written both.
func (s *server) probeClient() (*http.Client, string, error) {
	token, err := os.ReadFile(s.home.APIToken())
	if err != nil {
		return nil, "", fmt.Errorf("no API token yet: %w", err)
	}
	ca, err := os.ReadFile(filepath.Join(s.home.PKI(), "ca.crt"))
	if err != nil {
		return nil, "", fmt.Errorf("no CA yet: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, "", errors.New("the CA file holds no certificate yet")
	}
	return &http.Client{
		Timeout:   2 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}},
	}, strings.TrimSpace(string(token)), nil
}

func readyz(ctx context.Context, c *http.Client, addr, token string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/readyz", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/readyz answered %s", resp.Status)
	}
	return nil
}

// client is a dynamic client from the kubeconfig the server wrote, with
// client-go's 5 requests/s limit raised out of the way: the figures are the
// server's, not the client's rate limiter's. It gives up on a request after
// 30 s, a watch included: watch with watchClient.
func (s *server) client() (dynamic.Interface, error) {
	return kubeconfigClient(s.home, 30*time.Second)
}

// watchClient is client without the 30 s bound, for watches that outlast it.
func (s *server) watchClient() (dynamic.Interface, error) {
	return kubeconfigClient(s.home, 0)
}

func kubeconfigClient(h home.Layout, timeout time.Duration) (dynamic.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", h.Kubeconfig())
	if err != nil {
		return nil, fmt.Errorf("read the kubeconfig %s: %w", h.Kubeconfig(), err)
	}
	cfg.QPS, cfg.Burst = 10000, 10000
	cfg.Timeout = timeout
	return dynamic.NewForConfig(cfg)
}

// stop sends SIGINT (the server's clean stop) and waits; after timeout it
// kills. It returns how long the clean stop took.
func (s *server) stop(timeout time.Duration) (time.Duration, error) {
	return s.stopWith(syscall.SIGINT, timeout)
}

// stopWith is stop with another of the server's stop signals (SIGINT,
// SIGTERM, SIGHUP).
func (s *server) stopWith(sig syscall.Signal, timeout time.Duration) (time.Duration, error) {
	select {
	case <-s.exited:
		return 0, fmt.Errorf("the server had already exited (%v); its log %s ends:\n%s", s.waitErr, s.logPath, s.logTail(30))
	default:
	}
	start := time.Now()
	if err := s.cmd.Process.Signal(sig); err != nil {
		return 0, fmt.Errorf("signal the server: %w", err)
	}
	select {
	case <-s.exited:
		took := time.Since(start)
		if s.waitErr != nil {
			return took, fmt.Errorf("the server stopped with %v; its log %s ends:\n%s", s.waitErr, s.logPath, s.logTail(30))
		}
		return took, nil
	case <-time.After(timeout):
		_ = s.cmd.Process.Kill()
		<-s.exited
		return 0, fmt.Errorf("the server did not stop within %s of %v and was killed; its log %s ends:\n%s", timeout, sig, s.logPath, s.logTail(30))
	}
}

// logTail is the last n lines of the server's log.
func (s *server) logTail(n int) string {
	b, err := os.ReadFile(s.logPath)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// freeAddress is a loopback address with a port nobody listens on now.
func freeAddress() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}
