package agentd

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

func TestExec(t *testing.T) {
	r := newRig(t, nil)
	os.MkdirAll(filepath.Join(r.home, "sub"), 0o755)
	tests := map[string]struct {
		req  protocol.ExecRequest
		want protocol.ExecResponse
	}{
		"output and code": {protocol.ExecRequest{Command: "echo out; echo err >&2; exit 3"}, protocol.ExecResponse{ExitCode: 3, Stdout: "out\n", Stderr: "err\n"}},
		"runs in home":    {protocol.ExecRequest{Command: "pwd"}, protocol.ExecResponse{Stdout: r.home + "\n"}},
		"relative cwd":    {protocol.ExecRequest{Command: "pwd", Cwd: "sub"}, protocol.ExecResponse{Stdout: filepath.Join(r.home, "sub") + "\n"}},
		"environment":     {protocol.ExecRequest{Command: `echo "$HOME $DISPLAY"`}, protocol.ExecResponse{Stdout: r.home + " :0\n"}},
		"signal":          {protocol.ExecRequest{Command: "kill -TERM $$"}, protocol.ExecResponse{ExitCode: -1}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			for _, local := range []bool{false, true} {
				a := r.do("POST", protocol.PathExec, jsonBody(tc.req), !local, local)
				var got protocol.ExecResponse
				a.decode(t, &got)
				if diff := cmp.Diff(tc.want, got); a.status != 200 || diff != "" {
					t.Fatalf("exec %q (local %v) = %d, diff (-want +got):\n%s", tc.req.Command, local, a.status, diff)
				}
			}
		})
	}
	a := r.tcpDo("POST", protocol.PathExec, jsonBody(protocol.ExecRequest{Command: "true", Cwd: "missing"}))
	if a.status != 400 || a.code() != protocol.ErrInvalidRequest {
		t.Fatalf("exec in a missing cwd = %d %s, want 400 invalid_request", a.status, a.body)
	}
}

func TestExecCapsOutput(t *testing.T) {
	r := newRig(t, nil)
	a := r.tcpDo("POST", protocol.PathExec, jsonBody(protocol.ExecRequest{Command: "head -c 1500000 /dev/zero; head -c 1048577 /dev/zero >&2"}))
	var got protocol.ExecResponse
	a.decode(t, &got)
	if len(got.Stdout) != protocol.ExecOutputCap || !got.StdoutTruncated || len(got.Stderr) != protocol.ExecOutputCap || !got.StderrTruncated || got.ExitCode != 0 {
		t.Fatalf("capped exec: stdout %d bytes (truncated %v), stderr %d (truncated %v), exit %d; want %d each, truncated",
			len(got.Stdout), got.StdoutTruncated, len(got.Stderr), got.StderrTruncated, got.ExitCode, protocol.ExecOutputCap)
	}
}

// alive reports whether the pid written in file still runs.
func alive(t *testing.T, file string) (bool, int) {
	t.Helper()
	var b []byte
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ = os.ReadFile(file)
		if len(strings.TrimSpace(string(b))) > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("no pid in %s: %q", file, b)
	}
	// A killed child of the daemon is reaped by nobody here but the test
	// process's init; a zombie counts as dead.
	st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false, pid
	}
	fields := strings.Fields(string(st))
	return len(fields) > 2 && fields[2] != "Z", pid
}

// waitDead waits until the pid in file has gone.
func waitDead(t *testing.T, file, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ok, pid := alive(t, file)
		if !ok {
			return
		}
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("%s: process %d still runs", what, pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestExecTimeoutKillsTheGroup(t *testing.T) {
	r := newRig(t, nil)
	pidFile := filepath.Join(r.dir, "bg.pid")
	a := r.tcpDo("POST", protocol.PathExec, jsonBody(protocol.ExecRequest{Command: "sleep 60 & echo $! > " + pidFile + "; echo started; sleep 60", TimeoutMs: 300}))
	var got protocol.ExecResponse
	a.decode(t, &got)
	if !got.TimedOut || got.ExitCode != -1 || got.Stdout != "started\n" {
		t.Fatalf("timed-out exec = %+v, want timed_out, exit -1 and the output so far", got)
	}
	waitDead(t, pidFile, "the background job of a timed-out command")
}

func TestExecEndsBackgroundJobsWhenTheShellExits(t *testing.T) {
	r := newRig(t, nil)
	pidFile := filepath.Join(r.dir, "bg.pid")
	start := time.Now()
	a := r.tcpDo("POST", protocol.PathExec, jsonBody(protocol.ExecRequest{Command: "sleep 60 & echo $! > " + pidFile + "; echo done"}))
	var got protocol.ExecResponse
	a.decode(t, &got)
	if got.Stdout != "done\n" || got.TimedOut || time.Since(start) > 30*time.Second {
		t.Fatalf("exec with a background job = %+v", got)
	}
	waitDead(t, pidFile, "a background job after its shell exited")
}

func TestExecCancelledRequestKillsTheGroup(t *testing.T) {
	r := newRig(t, nil)
	pidFile := filepath.Join(r.dir, "cmd.pid")
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", r.tcp.URL+protocol.PathExec, jsonBody(protocol.ExecRequest{Command: "echo $$ > " + pidFile + "; sleep 60"}))
	req.Header.Set("Authorization", "Bearer "+testToken)
	done := make(chan error, 1)
	go func() {
		resp, err := r.tcp.Client().Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	if ok, _ := alive(t, pidFile); !ok {
		t.Fatal("the command never started")
	}
	cancel()
	<-done
	waitDead(t, pidFile, "a command whose request went away")
}
