package agentd

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/invisible-dots/invisible-dots/guest/agentd/agentdtest"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

type relayRun struct {
	opts   RelayOptions
	stdin  string
	code   int
	stdout string
	stderr string
}

func TestRelay(t *testing.T) {
	r := newRig(t, nil)
	os.MkdirAll(filepath.Join(r.home, "w"), 0o755)
	tests := map[string]relayRun{
		"input through":  {opts: RelayOptions{Argv: []string{"cat"}}, stdin: "abc\n", stdout: "abc\n"},
		"two streams":    {opts: RelayOptions{Argv: []string{"sh", "-c", "echo out; echo err >&2; exit 7"}}, code: 7, stdout: "out\n", stderr: "err\n"},
		"signal exit":    {opts: RelayOptions{Argv: []string{"sh", "-c", "kill -TERM $$"}}, code: 128 + 15},
		"relative cwd":   {opts: RelayOptions{Cwd: "w", Argv: []string{"pwd"}}, stdout: filepath.Join(r.home, "w") + "\n"},
		"env and path":   {opts: RelayOptions{Env: []string{"A=1"}, Argv: []string{"sh", "-c", `echo "$A $HOME $DISPLAY ${PATH%%:*}"`}}, stdout: "1 " + r.home + " :0 " + r.home + "/.local/bin\n"},
		"env-from":       {opts: RelayOptions{EnvFrom: []string{"SECRET"}, LookupEnv: func(n string) (string, bool) { return "s3cr3t", n == "SECRET" }, Argv: []string{"sh", "-c", "echo $SECRET"}}, stdout: "s3cr3t\n"},
		"no shell":       {opts: RelayOptions{Argv: []string{"echo", "$HOME", "a b"}}, stdout: "$HOME a b\n"},
		"eof ends input": {opts: RelayOptions{Argv: []string{"wc", "-c"}}, stdin: strings.Repeat("x", 100000), stdout: "100000\n"},
		"terminal": {opts: RelayOptions{TTY: true, Argv: []string{"sh", "-c", "test -t 0 && test -t 1 && stty size && echo to-stderr >&2"}},
			stdout: "24 80\r\nto-stderr\r\n"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var out, errOut strings.Builder
			o := tc.opts
			o.Socket, o.Stdout, o.Stderr = r.local, &out, &errOut
			o.Stdin = strings.NewReader(tc.stdin)
			code, err := Relay(t.Context(), o)
			if err != nil || code != tc.code || out.String() != tc.stdout || errOut.String() != tc.stderr {
				t.Fatalf("relay %q = code %d err %v stdout %q stderr %q; want %d %q %q", o.Argv, code, err, out.String(), errOut.String(), tc.code, tc.stdout, tc.stderr)
			}
		})
	}
	if strings.Contains(r.logs.String(), "s3cr3t") {
		t.Fatal("the log holds a value passed with --env-from")
	}
}

func TestRelayRefusals(t *testing.T) {
	r := newRig(t, nil)
	for name, o := range map[string]RelayOptions{
		"no program":       {Argv: nil},
		"bad env":          {Argv: []string{"true"}, Env: []string{"NOEQUALS"}},
		"env-from missing": {Argv: []string{"true"}, EnvFrom: []string{"SURELY_NOT_SET_ANYWHERE"}},
		"missing cwd":      {Argv: []string{"true"}, Cwd: "nope"},
		"unknown program":  {Argv: []string{"no-such-program-xyz"}},
		"no socket":        {Argv: []string{"true"}, Socket: filepath.Join(r.dir, "none.sock")},
	} {
		t.Run(name, func(t *testing.T) {
			if o.Socket == "" {
				o.Socket = r.local
			}
			var out strings.Builder
			o.Stdout, o.Stderr = &out, &out
			code, err := Relay(t.Context(), o)
			if err == nil || code != RelayExitUsage {
				t.Fatalf("relay %s = %d %v, want exit %d and an error", name, code, err, RelayExitUsage)
			}
		})
	}
}

// TestRelayReadsTheExitFrameStrictly: the exit status is the protocol's
// ProcExit exactly, or the relay says it could not tell (255 and an error
// naming the route), never a status read from something else.
func TestRelayReadsTheExitFrameStrictly(t *testing.T) {
	tests := map[string]struct {
		reason   string
		payload  string
		wantCode int
		wantErr  string
	}{
		"the protocol's": {reason: "the program's code", payload: `{"exit_code":3}`, wantCode: 3},
		"with a signal":  {reason: "the optional key", payload: `{"exit_code":143,"signal":15}`, wantCode: 143},
		"another case":   {reason: "a key in another case", payload: `{"Exit_Code":3}`, wantCode: 255, wantErr: `unknown field "Exit_Code"`},
		"unknown field":  {reason: "a field the protocol does not have", payload: `{"exit_code":3,"core":true}`, wantCode: 255, wantErr: `unknown field "core"`},
		"trailing value": {reason: "one JSON value a frame", payload: `{"exit_code":3} {"exit_code":0}`, wantCode: 255, wantErr: "more than one JSON value"},
		"not json":       {reason: "not JSON", payload: `3`, wantCode: 255, wantErr: "not valid JSON"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			sock := filepath.Join(t.TempDir(), "a.sock")
			ln, err := net.Listen("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			go func() {
				conn, err := ln.Accept()
				if err != nil {
					return
				}
				defer conn.Close()
				br := bufio.NewReader(conn)
				req, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				io.Copy(io.Discard, req.Body)
				fmt.Fprintf(conn, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: %s\r\n\r\n", protocol.ProcProtocol)
				protocol.WriteFrame(conn, protocol.FrameExit, []byte(tc.payload))
				for { // the relay's input, until it hangs up
					if _, _, err := protocol.ReadFrame(br); err != nil {
						return
					}
				}
			}()
			var out strings.Builder
			code, err := Relay(t.Context(), RelayOptions{Socket: sock, Argv: []string{"true"}, Stdin: strings.NewReader(""), Stdout: &out, Stderr: &out})
			if code != tc.wantCode {
				t.Errorf("%s: relay = %d, want %d (err %v)", tc.reason, code, tc.wantCode, err)
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("%s: relay = %v", tc.reason, err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), protocol.PathProc)):
				t.Errorf("%s: relay = %v, want an error naming %s and holding %q", tc.reason, err, protocol.PathProc, tc.wantErr)
			}
		})
	}
}

// rawProc opens POST /v1/proc by hand and returns the connection after the
// answer's head.
func rawProc(t *testing.T, sock string, req protocol.ProcRequest, upgrade bool) (net.Conn, *bufio.Reader, *http.Response) {
	t.Helper()
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(req)
	hdr := ""
	if upgrade {
		hdr = "Connection: Upgrade\r\nUpgrade: " + protocol.ProcProtocol + "\r\n"
	}
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: a\r\n%sContent-Length: %d\r\n\r\n%s", protocol.PathProc, hdr, len(body), body)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	return conn, br, resp
}

func TestProcRefusals(t *testing.T) {
	r := newRig(t, nil)
	conn, _, resp := rawProc(t, r.local, protocol.ProcRequest{Argv: []string{"true"}}, false)
	conn.Close()
	if resp.StatusCode != http.StatusUpgradeRequired {
		t.Fatalf("POST /v1/proc without the upgrade = %d, want 426", resp.StatusCode)
	}
	for name, req := range map[string]protocol.ProcRequest{
		"empty argv":    {},
		"empty program": {Argv: []string{""}},
		"bad cwd":       {Argv: []string{"true"}, Cwd: "/nonexistent-dir"},
		"bad env":       {Argv: []string{"true"}, Env: []string{"=x"}},
	} {
		conn, _, resp := rawProc(t, r.local, req, true)
		conn.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: %d, want 400", name, resp.StatusCode)
		}
	}
}

func TestProcFrames(t *testing.T) {
	r := newRig(t, nil)
	// A resize reaches the terminal, a signal frame reaches the group.
	conn, br, resp := rawProc(t, r.local, protocol.ProcRequest{Argv: []string{"sh", "-c", "read x; stty size; trap 'echo got-term; exit 9' TERM; echo ready; while :; do sleep 0.05; done"}, TTY: &protocol.TTYSize{Cols: 100, Rows: 30}}, true)
	defer conn.Close()
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade = %d", resp.StatusCode)
	}
	protocol.WriteFrame(conn, protocol.FrameResize, protocol.ResizePayload(protocol.TTYSize{Cols: 132, Rows: 43}))
	protocol.WriteFrame(conn, protocol.FrameInput, []byte("go\n"))
	var out strings.Builder
	var exit protocol.ProcExit
	sent := false
	for {
		typ, payload, err := protocol.ReadFrame(br)
		if err != nil {
			t.Fatalf("frames ended without an exit frame: %v; output %q", err, out.String())
		}
		if typ == protocol.FrameExit {
			json.Unmarshal(payload, &exit)
			break
		}
		if typ == protocol.FrameErrOutput {
			t.Fatalf("an error-output frame on a terminal: %q", payload)
		}
		out.Write(payload)
		if !sent && strings.Contains(out.String(), "ready") {
			protocol.WriteFrame(conn, protocol.FrameSignal, protocol.SignalPayload(int(syscall.SIGTERM)))
			sent = true
		}
	}
	if !strings.Contains(out.String(), "43 132") || !strings.Contains(out.String(), "got-term") || exit.ExitCode != 9 {
		t.Fatalf("output %q exit %+v; want the new size, the trapped TERM and exit 9", out.String(), exit)
	}
	conn.Close()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(r.logs.String(), "path=/v1/proc status=101") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(r.logs.String(), "path=/v1/proc status=101") {
		t.Fatalf("the log does not record the upgrade as 101:\n%s", r.logs.String())
	}
}

func TestProcDiesWithItsConnection(t *testing.T) {
	r := newRig(t, nil)
	pidFile := filepath.Join(r.dir, "p.pid")
	for _, tty := range []*protocol.TTYSize{nil, {Cols: 80, Rows: 24}} {
		os.Remove(pidFile)
		conn, _, resp := rawProc(t, r.local, protocol.ProcRequest{Argv: []string{"sh", "-c", "sleep 60 & echo $! > " + pidFile + "; wait"}, TTY: tty}, true)
		if resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("upgrade = %d", resp.StatusCode)
		}
		if ok, _ := alive(t, pidFile); !ok {
			t.Fatal("the program never started")
		}
		conn.Close()
		waitDead(t, pidFile, fmt.Sprintf("a process of a connection that went away (tty %v)", tty != nil))
	}
}

// TestRelayTerminal gives the relay a terminal of its own: it asks for the
// program's terminal at that size, puts its own in raw mode and back, and
// forwards a size change (SIGWINCH).
func TestRelayTerminal(t *testing.T) {
	r := newRig(t, nil)
	master, slave, err := r.srv.openPTY()
	if err != nil {
		t.Fatal(err)
	}
	defer master.Close()
	defer slave.Close()
	fd := int(slave.Fd())
	unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, &unix.Winsize{Row: 40, Col: 100})
	before, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	out := &agentdtest.LockedBuffer{}
	done := make(chan int, 1)
	go func() {
		code, _ := Relay(t.Context(), RelayOptions{Socket: r.local, TTY: true, Stdin: slave, Stdout: out, Stderr: out,
			Argv: []string{"sh", "-c", `stty size; while [ "$(stty size)" = "40 100" ]; do sleep 0.05; done; stty size`}})
		done <- code
	}()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(out.String(), "40 100") {
		if time.Now().After(deadline) {
			t.Fatalf("the program never saw the relay's terminal size; output %q", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	raw, _ := unix.IoctlGetTermios(fd, unix.TCGETS)
	if raw.Lflag&unix.ICANON != 0 || raw.Lflag&unix.ECHO != 0 {
		t.Errorf("the relay's terminal is not in raw mode while the program runs")
	}
	unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, &unix.Winsize{Row: 50, Col: 120})
	syscall.Kill(os.Getpid(), syscall.SIGWINCH)
	select {
	case code := <-done:
		if code != 0 || !strings.Contains(out.String(), "50 120") {
			t.Fatalf("relay = %d, output %q; want the new size 50 120", code, out.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the size change never reached the program; output %q", out.String())
	}
	after, _ := unix.IoctlGetTermios(fd, unix.TCGETS)
	if after.Lflag != before.Lflag || after.Iflag != before.Iflag || after.Oflag != before.Oflag {
		t.Fatalf("the relay left its terminal changed: lflag %#x -> %#x", before.Lflag, after.Lflag)
	}
}

// TestProcTerminalHeldByADetachedProcess: a process that left the group
// with setsid keeps the terminal open, yet the program's exit still ends the
// connection with its exit frame.
func TestProcTerminalHeldByADetachedProcess(t *testing.T) {
	r := newRig(t, nil)
	pidFile := filepath.Join(r.dir, "detached.pid")
	var out strings.Builder
	code, err := Relay(t.Context(), RelayOptions{Socket: r.local, TTY: true, Stdout: &out, Stderr: &out,
		Argv: []string{"sh", "-c", "setsid sh -c 'echo $$ > " + pidFile + "; exec sleep 30' & sleep 0.2; exit 4"}})
	if ok, pid := alive(t, pidFile); ok {
		defer syscall.Kill(pid, syscall.SIGKILL)
	}
	if err != nil || code != 4 {
		t.Fatalf("relay = %d %v (output %q), want exit 4", code, err, out.String())
	}
}
