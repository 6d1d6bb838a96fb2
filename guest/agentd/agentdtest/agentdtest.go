// Package agentdtest runs the real dot-agentd for the tests of the engine's
// packages (its tools, its MCP host, its browser): built once per test binary
// from guest/agentd/cmd/dot-agentd and started in development mode (work runs
// as the test's user) with a socket of its own. It runs as a process of its
// own, as in the guest: it changes its working directory while it checks a
// cwd, and the engine runs its relay subcommand.
package agentdtest

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// Token is the guest token of every dot-agentd Start runs.
const Token = "test-token-0123456789abcdef"

var (
	buildOnce sync.Once
	buildDir  string
	buildBin  string
	buildErr  error
)

// Binary builds dot-agentd once for this test binary and returns its path.
// It skips the test where there is no go command. The package's TestMain
// runs its tests through Main, which removes the binary at the end.
func Binary(t testing.TB) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is needed to build dot-agentd")
	}
	buildOnce.Do(func() {
		if buildDir, buildErr = os.MkdirTemp("", "agentdtest"); buildErr != nil {
			return
		}
		buildBin = filepath.Join(buildDir, "dot-agentd")
		cmd := exec.Command(goBin, "build", "-o", buildBin, "github.com/invisible-dots/invisible-dots/guest/agentd/cmd/dot-agentd")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("build dot-agentd: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildBin
}

// Main runs m's tests and removes what Binary built: a TestMain ends with
// os.Exit(agentdtest.Main(m)).
func Main(m *testing.M) int {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	return code
}

// Agentd is a dot-agentd that Start runs until its test ends.
type Agentd struct {
	// Bin is its binary, whose relay subcommand the engine runs.
	Bin string
	// Socket is its local socket.
	Socket string
	log    LockedBuffer
}

// Log is what it wrote on its standard error so far.
func (a *Agentd) Log() string { return a.log.String() }

// Start runs dot-agentd in development mode with home as the home its work
// is confined to; dotID names the guest in its config. Its log is shown when
// the test fails.
func Start(t testing.TB, home, dotID string) *Agentd {
	t.Helper()
	a := &Agentd{Bin: Binary(t)}
	// Not t.TempDir: a socket's path must stay under the kernel's 108 bytes.
	dir, err := os.MkdirTemp("", "agentd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	a.Socket = filepath.Join(dir, "agentd.sock")
	config := filepath.Join(dir, "config.json")
	gc, _ := json.Marshal(protocol.GuestConfig{DotID: dotID, Token: Token})
	if err := os.WriteFile(config, gc, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(a.Bin, "--listen", "127.0.0.1:0", "--socket", a.Socket, "--config", config, "--run-as", "", "--home", home)
	cmd.Dir = dir
	cmd.Stderr = &a.log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("dot-agentd's log:\n%s", a.Log())
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		if c, err := net.Dial("unix", a.Socket); err == nil {
			c.Close()
			return a
		}
		if time.Now().After(deadline) {
			t.Fatalf("dot-agentd did not open its socket in 20 s:\n%s", a.Log())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// LockedBuffer is a log sink that goroutines and processes write to at once.
type LockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *LockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
