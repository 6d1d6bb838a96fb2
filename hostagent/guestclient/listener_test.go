package guestclient

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// relayEnv makes the test binary a relay (TestMain): a process of its own
// listening on a port and copying each connection to RELAY_TO, what a local
// process that took a port the host has on record, and can reach a live
// dot-agentd holding the same token, would do.
const relayEnv = "GUESTCLIENT_TEST_RELAY_TO"

func TestMain(m *testing.M) {
	if to := os.Getenv(relayEnv); to != "" {
		relay(to)
		return
	}
	os.Exit(m.Run())
}

func relay(to string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		os.Exit(2)
	}
	fmt.Println(ln.Addr().(*net.TCPAddr).Port)
	for {
		c, err := ln.Accept()
		if err != nil {
			os.Exit(0)
		}
		go func() {
			defer c.Close()
			u, err := net.Dial("tcp", to)
			if err != nil {
				return
			}
			defer u.Close()
			go io.Copy(u, c)
			io.Copy(c, u)
		}()
	}
}

// startRelay starts the relay to the guest at port and returns its port and
// pid.
func startRelay(t *testing.T, port int) (int, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), relayEnv+"=127.0.0.1:"+strconv.Itoa(port))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("relay did not start: %v", err)
	}
	p, _ := strconv.Atoi(strings.TrimSpace(line))
	return p, cmd.Process.Pid
}

func TestRelayedProofIsRefused(t *testing.T) {
	g := &guest{proofToken: token}
	real := start(t, g) // the live guest holding the token, in this process
	relayPort, relayPID := startRelay(t, real.Port)
	startTicks, bootID := self(t)
	tests := map[string]struct {
		reason string
		target Target
		wantOK bool
	}{
		"the real guest": {
			reason: "the port's listener is the process on record",
			target: Target{Port: real.Port, PID: os.Getpid(), Token: token, StartTicks: startTicks, BootID: bootID},
			wantOK: true,
		},
		"a relay on the QEMU's port": {
			reason: "the port on record is held by another process than the QEMU on record",
			target: Target{Port: relayPort, PID: os.Getpid(), Token: token, StartTicks: startTicks, BootID: bootID},
		},
		"a relay with the pid recycled": {
			reason: "the pid on record is alive and holds the port, but started at another time",
			target: Target{Port: relayPort, PID: relayPID, Token: token, StartTicks: startTicks, BootID: bootID},
		},
		"a record of another boot": {
			reason: "a record written before the host restarted names no process",
			target: Target{Port: real.Port, PID: os.Getpid(), Token: token, StartTicks: startTicks, BootID: "00000000-0000-0000-0000-000000000000"},
		},
		"no start time": {
			reason: "a target without the QEMU's start time is refused, never proved with the pid alone",
			target: Target{Port: real.Port, PID: os.Getpid(), Token: token, BootID: bootID},
		},
		"no boot id": {
			reason: "a target without the boot id is refused, never proved without it",
			target: Target{Port: real.Port, PID: os.Getpid(), Token: token, StartTicks: startTicks},
		},
		"neither": {
			reason: "pid, uid and the socket's owner alone are not the QEMU's identity",
			target: Target{Port: real.Port, PID: os.Getpid(), Token: token},
		},
		"no pid": {
			reason: "a port without the QEMU on record proves nothing",
			target: Target{Port: real.Port, Token: token},
		},
		"a pid that does not run": {
			reason: "a QEMU that exited",
			target: Target{Port: real.Port, PID: 1 << 30, Token: token},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			before := g.proofCount()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := New().Health(ctx, tc.target)
			switch {
			case tc.wantOK && err != nil:
				t.Errorf("%s: Health = %v, want ok", tc.reason, err)
			case !tc.wantOK && !errors.Is(err, ErrGuestUnproven):
				t.Errorf("%s: Health = %v, want ErrGuestUnproven", tc.reason, err)
			case !tc.wantOK && g.proofCount() != before:
				t.Errorf("%s: a nonce reached the guest before the listener was checked", tc.reason)
			}
		})
	}
}

func TestParseListeners(t *testing.T) {
	table := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:9C40 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 111 1 0000000000000000 100 0 0 10 0
   1: 00000000:9C40 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 222 1 0000000000000000 100 0 0 10 0
   2: 0100007F:9C40 0100007F:D431 01 00000000:00000000 00:00000000 00000000  1000        0 333 1 0000000000000000 100 0 0 10 0
   3: 0200007F:9C40 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 444 1 0000000000000000 100 0 0 10 0
   4: 0100007F:9C41 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 555 1 0000000000000000 100 0 0 10 0
`
	got, err := parseListeners(bufio.NewScanner(strings.NewReader(table)), 0x9C40)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != "[111 222]" {
		t.Errorf("listeners on 40000 = %v, want [111 222] (127.0.0.1 and 0.0.0.0, listening only)", got)
	}
}

func (g *guest) proofCount() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.proofs
}

// self is this process's identity as a record gives it: its start time and
// the host's boot id. The test guests listen in this process.
func self(t *testing.T) (uint64, string) {
	t.Helper()
	start, _, err := processOf(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		t.Fatal(err)
	}
	return start, strings.TrimSpace(string(boot))
}
