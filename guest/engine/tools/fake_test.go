package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/png"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// fakeAgentd serves the file routes of dot-agentd's local socket over the
// real paths of this machine, as dot-agentd does in development mode. A path
// with "forbidden" in it answers permission_denied, as a path dot may not
// open does. PUT does not make missing folders (the tools must).
type fakeAgentd struct {
	mu   sync.Mutex
	puts []string
}

func (f *fakeAgentd) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == protocol.PathScreenshot {
		// A desktop of 2560x1440, twice what a model is shown.
		w.Header().Set("Content-Type", "image/png")
		_ = png.Encode(w, image.NewRGBA(image.Rect(0, 0, 2560, 1440)))
		return
	}
	p := r.URL.Query().Get(protocol.QueryPath)
	fail := func(status int, code string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(protocol.ErrorResponse{Error: code, Message: code + ": " + p})
	}
	if !filepath.IsAbs(p) {
		fail(400, protocol.ErrInvalidRequest)
		return
	}
	if strings.Contains(p, "forbidden") {
		fail(403, protocol.ErrPermissionDenied)
		return
	}
	st, statErr := os.Stat(p)
	switch {
	case r.Method == http.MethodGet && r.URL.Path == protocol.PathFiles:
		if statErr != nil {
			fail(404, protocol.ErrNotFound)
			return
		}
		if st.IsDir() {
			fail(400, protocol.ErrIsDirectory)
			return
		}
		b, _ := os.ReadFile(p)
		w.Write(b)
	case r.Method == http.MethodPut && r.URL.Path == protocol.PathFiles:
		if statErr == nil && st.IsDir() {
			fail(400, protocol.ErrIsDirectory)
			return
		}
		if _, err := os.Stat(filepath.Dir(p)); err != nil {
			fail(404, protocol.ErrNotFound)
			return
		}
		b, _ := io.ReadAll(r.Body)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			fail(500, protocol.ErrInternal)
			return
		}
		f.mu.Lock()
		f.puts = append(f.puts, p)
		f.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	case r.Method == http.MethodGet && r.URL.Path == protocol.PathFilesList:
		if statErr != nil {
			fail(404, protocol.ErrNotFound)
			return
		}
		if !st.IsDir() {
			fail(400, protocol.ErrNotDirectory)
			return
		}
		des, _ := os.ReadDir(p)
		var lr protocol.ListResponse
		lr.Entries = []protocol.ListEntry{}
		for _, de := range des {
			info, err := os.Stat(filepath.Join(p, de.Name()))
			e := protocol.ListEntry{Name: de.Name(), Type: protocol.EntryOther}
			if err == nil {
				switch {
				case info.IsDir():
					e.Type = protocol.EntryDir
				case info.Mode().IsRegular():
					e.Type = protocol.EntryFile
				}
				e.Size = info.Size()
				e.Mtime = info.ModTime().UTC().Format(time.RFC3339)
			}
			lr.Entries = append(lr.Entries, e)
		}
		sort.Slice(lr.Entries, func(i, j int) bool { return lr.Entries[i].Name < lr.Entries[j].Name })
		_ = json.NewEncoder(w).Encode(lr)
	default:
		fail(404, protocol.ErrNotFound)
	}
}

func (f *fakeAgentd) putCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.puts)
}

// fakeRelayScript stands in for `dot-agentd relay`: it takes the relay's
// options, logs its arguments, and runs the program in the working directory
// (on a pseudo-terminal through util-linux script with --tty).
const fakeRelayScript = `#!/bin/bash
printf '%s\n' "$*" >> @LOG@
[ "$1" = relay ] || { echo "fake relay: want the relay subcommand" >&2; exit 2; }
shift
tty=0; cwd=
while [ $# -gt 0 ]; do
  case "$1" in
    --socket) [ -S "$2" ] || { echo "fake relay: no socket $2" >&2; exit 2; }; shift 2;;
    --cwd) cwd="$2"; shift 2;;
    --tty) tty=1; shift;;
    --env) export "$2"; shift 2;;
    --env-from) shift 2;;
    --) shift; break;;
    *) echo "fake relay: unknown option $1" >&2; exit 2;;
  esac
done
# dot-agentd gives the program dot's HOME, USER, LOGNAME and SHELL (ref 5.2).
export HOME=@HOME@ USER=dot LOGNAME=dot SHELL=/bin/bash
if [ -n "$cwd" ]; then cd "$cwd" 2>/dev/null || { echo "dot-agentd: bad cwd $cwd" >&2; exit 1; }; fi
if [ $tty = 1 ]; then exec script -qefc "$(printf '%q ' "$@")" /dev/null; fi
exec "$@"
`

type fixture struct {
	runner    *Runner
	agentd    *fakeAgentd
	workspace string
	home      string
	relayLog  string
	cron      *fakeCron
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("bash is needed for the stand-in relay")
	}
	// A short directory: unix socket paths are limited to 108 bytes.
	sockDir, err := os.MkdirTemp("", "e2t")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	socket := filepath.Join(sockDir, "agentd.sock")
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	fa := &fakeAgentd{}
	srv := httptest.NewUnstartedServer(fa)
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)

	home := t.TempDir()
	ws := filepath.Join(home, "workspace")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(sockDir, "relay.log")
	relay := filepath.Join(sockDir, "dot-agentd")
	if err := os.WriteFile(relay, []byte(strings.NewReplacer("@LOG@", logPath, "@HOME@", home).Replace(fakeRelayScript)), 0o755); err != nil {
		t.Fatal(err)
	}
	fc := &fakeCron{}
	r := NewRunner(Env{
		AgentdSocket: socket, RelayPath: relay, Home: home, Workspace: ws, Cron: fc,
		Path: os.Getenv("PATH"),
	})
	t.Cleanup(r.Close)
	return &fixture{runner: r, agentd: fa, workspace: ws, home: home, relayLog: logPath, cron: fc}
}

func (f *fixture) run(t *testing.T, name string, args any) Result {
	t.Helper()
	raw, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	return f.runner.Run(context.Background(), name, raw)
}

func (f *fixture) write(t testing.TB, rel, content string) string {
	t.Helper()
	p := filepath.Join(f.workspace, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func (f *fixture) read(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(f.workspace, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// fakeCron is an in-memory CronStore.
type fakeCron struct {
	mu   sync.Mutex
	jobs []CronJob
}

func (c *fakeCron) AddJob(_ context.Context, j CronJob) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, x := range c.jobs {
		if x.Name == j.Name {
			return fmt.Errorf("add %s: %w", j.Name, ErrCronJobExists)
		}
	}
	c.jobs = append(c.jobs, j)
	return nil
}

func (c *fakeCron) ListJobs(context.Context) ([]CronJob, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]CronJob(nil), c.jobs...), nil
}

func (c *fakeCron) RemoveJob(_ context.Context, name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, x := range c.jobs {
		if x.Name == name {
			c.jobs = append(c.jobs[:i], c.jobs[i+1:]...)
			return nil
		}
	}
	return fmt.Errorf("remove %s: %w", name, ErrCronJobNotFound)
}

var errFakeStore = errors.New("the store is closed")
