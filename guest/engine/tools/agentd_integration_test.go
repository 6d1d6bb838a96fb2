package tools

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/invisible-dots/invisible-dots/guest/agentd/agentdtest"
)

// These tests run the tools against the real dot-agentd, built from
// guest/agentd/cmd/dot-agentd, in development mode (work runs as this test's
// user): its local socket and its relay. It runs as a process of its own, as
// in the guest: it changes its working directory while it checks a cwd.

func TestMain(m *testing.M) { os.Exit(agentdtest.Main(m)) }

func newRealFixture(t testing.TB) *fixture {
	t.Helper()
	home := t.TempDir()
	ws := filepath.Join(home, "workspace")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	agentd := agentdtest.Start(t, home, "test/e2")
	socket, bin := agentd.Socket, agentd.Bin
	r := NewRunner(Env{AgentdSocket: socket, RelayPath: bin, Home: home, Workspace: ws, Path: os.Getenv("PATH"), Cron: &fakeCron{}})
	t.Cleanup(r.Close)
	return &fixture{runner: r, workspace: ws, home: home}
}

func TestWithRealAgentd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds dot-agentd")
	}
	f := newRealFixture(t)

	t.Run("exec", func(t *testing.T) {
		res := f.run(t, "exec", map[string]any{"command": "cat; echo out; echo err >&2; pwd; exit 4"})
		for _, want := range []string{"out\n", "STDERR:\n", "err\n", f.workspace + "\n", "Exit code: 4"} {
			if !strings.Contains(res.Text, want) {
				t.Errorf("exec through the real relay: %q lacks %q", res.Text, want)
			}
		}
		if res.OK {
			t.Errorf("exit 4 reported ok")
		}
	})

	t.Run("timeout ends the remote group", func(t *testing.T) {
		pidFile := filepath.Join(f.workspace, "pid")
		res := f.run(t, "exec", map[string]any{"command": "sleep 30 & echo $! > " + pidFile + "; wait", "timeout": 1})
		if res.OK || !strings.Contains(res.Text, "timed out") {
			t.Fatalf("timeout: %+v", res)
		}
		b, _ := os.ReadFile(pidFile)
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		// dot-agentd kills the group when the relay goes; give it the moment
		// that takes without timing the test.
		for i := 0; i < 200 && pid > 0 && syscall.Kill(pid, 0) == nil; i++ {
			waitABit()
		}
		if pid == 0 || !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			t.Errorf("the background sleep %d of a timed-out command survives", pid)
		}
	})

	t.Run("terminal session", func(t *testing.T) {
		res := f.run(t, "exec", map[string]any{"command": `printf '\033[32mready\033[0m> '; read x; echo "got $x"; echo "term=$TERM"`, "tty": true, "yield_time_ms": 500})
		if !res.TTY || !res.OK {
			t.Fatalf("exec tty: %+v", res)
		}
		text := res.Text
		res = f.run(t, "exec_session", map[string]any{"session_id": res.Text[strings.Index(res.Text, "session (80x24) ")+16 : strings.Index(res.Text, ". Use")], "input": "abc\n", "yield_time_ms": 10000})
		text += res.Text
		for _, want := range []string{"ready> abc\n", "got abc\n", "term=xterm-256color\n", "has ended: exited with code 0"} {
			if !strings.Contains(text, want) {
				t.Errorf("terminal text %q lacks %q", text, want)
			}
		}
		if strings.Contains(text, "\x1b") || strings.Contains(text, "\r") {
			t.Errorf("terminal text holds control characters: %q", text)
		}
	})

	t.Run("files", func(t *testing.T) {
		if res := f.run(t, "write_file", map[string]any{"path": "d/e/n.txt", "content": "x = 1\ny = 2\n"}); !res.OK {
			t.Fatalf("write_file: %+v", res)
		}
		if res := f.run(t, "edit_file", map[string]any{"path": "d/e/n.txt", "old_text": "y = 2", "new_text": "y = 3"}); !res.OK {
			t.Fatalf("edit_file: %+v", res)
		}
		res := f.run(t, "read_file", map[string]any{"path": "d/e/n.txt"})
		if res.Text != "     1\tx = 1\n     2\ty = 3" {
			t.Errorf("read_file: %q", res.Text)
		}
		res = f.run(t, "list_dir", map[string]any{"recursive": true})
		if !strings.Contains(res.Text, "d/e/n.txt (12 B)") {
			t.Errorf("list_dir: %q", res.Text)
		}
		res = f.run(t, "grep", map[string]any{"pattern": `y = \d`})
		if res.Text != "d/e/n.txt:2:y = 3\n[1 match(es) in 1 file(s)]" {
			t.Errorf("grep: %q", res.Text)
		}
		res = f.run(t, "find_files", map[string]any{"glob": "**/*.txt"})
		if !strings.Contains(res.Text, "d/e/n.txt") {
			t.Errorf("find_files: %q", res.Text)
		}
		res = f.run(t, "read_file", map[string]any{"path": "/nonexistent/x"})
		if res.OK || res.Text != "/nonexistent/x does not exist." {
			t.Errorf("read_file of nothing: %+v", res)
		}
	})
}

func TestRealRelayArgv(t *testing.T) {
	// The argv the runner builds parses with the real relay's flags: an
	// unknown flag would make the relay exit 125 before running anything.
	if testing.Short() {
		t.Skip("builds dot-agentd")
	}
	f := newRealFixture(t)
	r := f.runner
	j, err := r.runRelay(relaySpec{Argv: []string{"/bin/sh", "-c", "echo $A$B"}, Cwd: f.workspace, Env: []string{"A=x"}, EnvFrom: map[string]string{"B": "y"}}, "echo")
	if err != nil {
		t.Fatal(err)
	}
	<-j.done
	out, errOut, _ := j.take()
	if out != "xy\n" || j.exit != 0 {
		t.Errorf("relay with --env and --env-from: out %q err %q exit %d", out, errOut, j.exit)
	}
}

// waitABit yields to the processes the test waits on.
func waitABit() { time.Sleep(10 * time.Millisecond) }
