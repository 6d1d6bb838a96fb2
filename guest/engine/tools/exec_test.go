package tools

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestExecForeground(t *testing.T) {
	f := newFixture(t)
	if err := os.MkdirAll(filepath.Join(f.workspace, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		args     map[string]any
		wantOK   bool
		contains []string
	}{
		"output and exit code 0": {map[string]any{"command": "echo hello"}, true, []string{"hello\n", "Exit code: 0"}},
		"stderr and a failing code": {
			map[string]any{"command": "echo out; echo oops >&2; exit 3"}, false,
			[]string{"out\n", "STDERR:\noops\n", "Exit code: 3"},
		},
		"runs in the workspace by default":      {map[string]any{"command": "pwd"}, true, []string{f.workspace + "\n"}},
		"a relative cwd is under the workspace": {map[string]any{"command": "pwd", "cwd": "sub"}, true, []string{filepath.Join(f.workspace, "sub") + "\n"}},
		"a bad cwd is the relay's error":        {map[string]any{"command": "pwd", "cwd": "nope"}, false, []string{"bad cwd", "Exit code: 1"}},
		"no output says so":                     {map[string]any{"command": "true"}, true, []string{"(no output)", "Exit code: 0"}},
		"a foreground command's input is empty": {map[string]any{"command": "cat; echo after"}, true, []string{"after\n", "Exit code: 0"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			res := f.run(t, "exec", tc.args)
			if res.OK != tc.wantOK || res.TTY || res.Interrupted {
				t.Errorf("exec %v: %+v, want ok=%v", tc.args, res, tc.wantOK)
			}
			for _, c := range tc.contains {
				if !strings.Contains(res.Text, c) {
					t.Errorf("exec %v text %q lacks %q", tc.args, res.Text, c)
				}
			}
		})
	}
	// The relay is run by argv, through bash -lc, with the socket.
	log, _ := os.ReadFile(f.relayLog)
	if !strings.Contains(string(log), "relay --socket "+f.runner.env.AgentdSocket+" --cwd "+f.workspace+" -- /bin/bash -lc echo hello") {
		t.Errorf("relay argv log:\n%s", log)
	}
}

func TestExecTimeoutKillsTheCommand(t *testing.T) {
	f := newFixture(t)
	pidFile := filepath.Join(f.workspace, "pid")
	res := f.run(t, "exec", map[string]any{"command": "echo $$ > " + pidFile + "; echo started; exec sleep 30", "timeout": 1})
	if res.OK || !strings.Contains(res.Text, "timed out after 1s") || !strings.Contains(res.Text, "started") {
		t.Fatalf("timeout result: %+v", res)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("the timed-out command %d still exists (kill 0: %v)", pid, err)
	}
}

func TestExecCancelIsInterrupted(t *testing.T) {
	// A cancel in the foreground wait and one before a background job's
	// yield end the command alike; only the terminal flag differs.
	tests := map[string]struct {
		args    map[string]any
		wantTTY bool
	}{
		"foreground":            {args: map[string]any{}},
		"before the yield":      {args: map[string]any{"yield_time_ms": 600000}},
		"terminal before yield": {args: map[string]any{"yield_time_ms": 600000, "tty": true}, wantTTY: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			ctx, cancel := context.WithCancel(context.Background())
			marker := filepath.Join(f.workspace, "started")
			go func() {
				// Cancel once the command runs, as a stop at the end of its grace does.
				for i := 0; i < 500; i++ {
					if _, err := os.Stat(marker); err == nil {
						break
					}
					time.Sleep(10 * time.Millisecond)
				}
				cancel()
			}()
			args := map[string]any{"command": "touch " + marker + "; sleep 30"}
			for k, v := range tc.args {
				args[k] = v
			}
			raw, _ := json.Marshal(args)
			res := f.runner.Run(ctx, "exec", raw)
			if res.OK || !res.Interrupted || res.TTY != tc.wantTTY || !strings.Contains(res.Text, "stopped before it finished") {
				t.Errorf("cancelled exec %v: %+v", args, res)
			}
		})
	}
}

func TestBackgroundJob(t *testing.T) {
	f := newFixture(t)
	res := f.run(t, "exec", map[string]any{"command": "echo start; read line; echo got $line; echo bye >&2", "yield_time_ms": 100})
	if !res.OK || !strings.Contains(res.Text, "still running as background job s1") {
		t.Fatalf("exec with yield_time_ms: %+v", res)
	}
	out := res.Text

	list := f.run(t, "list_exec_sessions", map[string]any{})
	if !list.OK || !regexp.MustCompile(`s1: running \(job, started .* ago\): echo start; read line`).MatchString(list.Text) {
		t.Errorf("list_exec_sessions: %+v", list)
	}

	res = f.run(t, "exec_session", map[string]any{"session_id": "s1", "input": "hello\n", "yield_time_ms": 10000})
	out += res.Text
	if !res.OK || !strings.Contains(res.Text, "s1 has ended: exited with code 0.") {
		t.Fatalf("exec_session input: %+v", res)
	}
	for _, want := range []string{"start", "got hello", "STDERR:\nbye"} {
		if !strings.Contains(out, want) {
			t.Errorf("the job's output %q lacks %q", out, want)
		}
	}
	// An ended job whose end was read is gone.
	if res := f.run(t, "list_exec_sessions", map[string]any{}); res.Text != "There are no background jobs." {
		t.Errorf("after the end: %+v", res)
	}
	if res := f.run(t, "exec_session", map[string]any{"session_id": "s1"}); res.OK || !strings.Contains(res.Text, `There is no background job "s1"`) {
		t.Errorf("a forgotten job: %+v", res)
	}
}

func TestBackgroundJobCloseStdinAndTerminate(t *testing.T) {
	f := newFixture(t)
	res := f.run(t, "exec", map[string]any{"command": "cat; echo eof-seen", "yield_time_ms": 0})
	if !res.OK {
		t.Fatalf("exec: %+v", res)
	}
	res = f.run(t, "exec_session", map[string]any{"session_id": "s1", "input": "abc\n", "close_stdin": true, "yield_time_ms": 10000})
	if !strings.Contains(res.Text, "abc\neof-seen") || !strings.Contains(res.Text, "has ended") {
		t.Errorf("close_stdin: %+v", res)
	}

	pidFile := filepath.Join(f.workspace, "pid")
	res = f.run(t, "exec", map[string]any{"command": "echo $$ > " + pidFile + "; exec sleep 60", "yield_time_ms": 200})
	if !strings.Contains(res.Text, "background job s2") {
		t.Fatalf("exec: %+v", res)
	}
	res = f.run(t, "exec_session", map[string]any{"session_id": "s2", "terminate": true})
	if !res.OK || !strings.Contains(res.Text, "Terminated s2") {
		t.Errorf("terminate: %+v", res)
	}
	b, _ := os.ReadFile(pidFile)
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if pid == 0 || !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
		t.Errorf("the terminated job %d still exists", pid)
	}
	if res := f.run(t, "exec_session", map[string]any{"session_id": "s2", "input": "x"}); res.OK {
		t.Errorf("input to a terminated job: %+v", res)
	}
}

func TestTerminateAnEndedJob(t *testing.T) {
	f := newFixture(t)
	res := f.run(t, "exec", map[string]any{"command": "sleep 0.2; exit 5", "yield_time_ms": 0})
	if !strings.Contains(res.Text, "background job s1") {
		t.Fatalf("exec: %+v", res)
	}
	for i := 0; i < 1000 && !strings.Contains(f.run(t, "list_exec_sessions", map[string]any{}).Text, "exited"); i++ {
		waitABit()
	}
	res = f.run(t, "exec_session", map[string]any{"session_id": "s1", "terminate": true})
	if !res.OK || !strings.HasPrefix(res.Text, "s1 had already ended (exited with code 5).") {
		t.Errorf("terminate after the end: %+v", res)
	}
}

func TestBackgroundJobsAreBounded(t *testing.T) {
	f := newFixture(t)
	for i := 0; i < MaxJobs; i++ {
		if res := f.run(t, "exec", map[string]any{"command": "sleep 60", "yield_time_ms": 0}); !res.OK {
			t.Fatalf("job %d: %+v", i, res)
		}
	}
	res := f.run(t, "exec", map[string]any{"command": "sleep 60", "yield_time_ms": 0})
	if res.OK || !strings.Contains(res.Text, "the most there may be") {
		t.Errorf("job over the bound: %+v", res)
	}
	// A foreground command still runs.
	if res := f.run(t, "exec", map[string]any{"command": "echo fine"}); !res.OK {
		t.Errorf("foreground exec at the bound: %+v", res)
	}
}

func TestTTYSession(t *testing.T) {
	f := newFixture(t)
	if _, err := os.Stat("/usr/bin/script"); err != nil {
		t.Skip("the stand-in relay needs util-linux script for a pseudo-terminal")
	}
	res := f.run(t, "exec", map[string]any{"command": `printf '\033[1mname?\033[0m '; read n; printf 'working 10%%\rworking 100%%\n'; echo "hi $n"`, "tty": true, "yield_time_ms": 500})
	if !res.OK || !res.TTY || !strings.Contains(res.Text, "terminal session (80x24) s1") {
		t.Fatalf("exec tty: %+v", res)
	}
	log, _ := os.ReadFile(f.relayLog)
	if !strings.Contains(string(log), "--tty --env TERM=xterm-256color --env COLUMNS=80 --env LINES=24 -- /bin/bash -lc") {
		t.Errorf("relay argv for a terminal:\n%s", log)
	}
	var screen strings.Builder
	screen.WriteString(res.Text)
	res = f.run(t, "exec_session", map[string]any{"session_id": "s1", "input": "bob\n", "yield_time_ms": 10000})
	screen.WriteString(res.Text)
	text := screen.String()
	for _, want := range []string{"name? bob\n", "working 100%\n", "hi bob\n", "s1 has ended: exited with code 0."} {
		if !strings.Contains(text, want) {
			t.Errorf("screen text %q lacks %q", text, want)
		}
	}
	for _, never := range []string{"\x1b", "\r", "working 10%\n"} {
		if strings.Contains(text, never) {
			t.Errorf("screen text %q holds %q", text, never)
		}
	}
}

func TestTTYControlC(t *testing.T) {
	f := newFixture(t)
	if _, err := os.Stat("/usr/bin/script"); err != nil {
		t.Skip("the stand-in relay needs util-linux script for a pseudo-terminal")
	}
	res := f.run(t, "exec", map[string]any{"command": "echo ready; sleep 60", "tty": true, "yield_time_ms": 300})
	if !res.TTY {
		t.Fatalf("exec tty: %+v", res)
	}
	res = f.run(t, "exec_session", map[string]any{"session_id": "s1", "input": "\x03", "yield_time_ms": 10000})
	if !strings.Contains(res.Text, "s1 has ended") {
		t.Errorf("^C did not end the terminal job: %+v", res)
	}
}

func TestExecWithoutRelay(t *testing.T) {
	r := NewRunner(Env{})
	res := r.Run(context.Background(), "exec", json.RawMessage(`{"command":"ls"}`))
	if res.OK || !strings.Contains(res.Text, "the dot-agentd relay is not configured") {
		t.Errorf("exec without a relay: %+v", res)
	}
}
