package qemu

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/hostagent/driver"
	"github.com/invisible-dots/invisible-dots/hostagent/guestclient"
	"github.com/invisible-dots/invisible-dots/internal/home"
)

var testID = home.VMID{Namespace: "team-a", Name: "helper"}

// testDriver is a Driver on a temporary home whose boot source the test
// controls; it never runs QEMU.
func testDriver(t *testing.T, boot *home.Stamp) *Driver {
	t.Helper()
	h := home.Layout{Root: t.TempDir()}
	guest := guestclient.New()
	// The stand-in QEMU (a bystander process) does not hold the fake
	// guest's port, which this test process serves: the listener rule is
	// guestclient's to test, not this driver's.
	guest.ListenerRule = func(guestclient.Target) error { return nil }
	d := &Driver{
		home: h, boot: func() (home.Stamp, error) { return *boot, nil }, guest: guest, environ: os.Environ,
		KillWait: time.Second, pollInterval: 20 * time.Millisecond, pickPort: freePort,
		vmLocks: map[home.VMID]*sync.Mutex{}, children: map[int]*child{}, exits: map[home.VMID]exitInfo{},
	}
	if err := os.MkdirAll(h.VM(testID).Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return d
}

// bystander is a live process that is not QEMU: a recycled pid, or whatever
// the kernel handed the pid to. The tests check it survives.
func bystander(t *testing.T) (*exec.Cmd, uint64) {
	t.Helper()
	cmd := exec.Command("sleep", "300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-exited })
	info, err := readProc(cmd.Process.Pid)
	if err != nil || !info.Exists {
		t.Fatalf("readProc(sleep) = %+v, %v", info, err)
	}
	return cmd, info.StartTicks
}

func alive(t *testing.T, pid int) bool {
	t.Helper()
	info, err := readProc(pid)
	if err != nil {
		t.Fatal(err)
	}
	return info.Exists
}

// deadPID returns the pid of a process that has exited and been reaped.
func deadPID(t *testing.T) int {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

// listener is a foreign program on a port: it counts connections and
// records whether anything ever sent it an Authorization header.
type listener struct {
	port    int
	conns   atomic.Int32
	sawAuth atomic.Bool
	ln      net.Listener
}

func foreignListener(t *testing.T) *listener {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &listener{port: ln.Addr().(*net.TCPAddr).Port, ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			l.conns.Add(1)
			go func() {
				defer c.Close()
				buf := make([]byte, 4096)
				c.SetReadDeadline(time.Now().Add(2 * time.Second))
				n, _ := c.Read(buf)
				if containsFold(string(buf[:n]), "authorization") {
					l.sawAuth.Store(true)
				}
				c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"))
			}()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return l
}

func containsFold(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		match := true
		for j := 0; j < len(sub); j++ {
			a, b := s[i+j], sub[j]
			if a >= 'A' && a <= 'Z' {
				a += 'a' - 'A'
			}
			if a != b {
				match = false
				break
			}
		}
		if match {
			return true
		}
	}
	return false
}

func writeTestRecord(t *testing.T, d *Driver, rec record) {
	t.Helper()
	if err := writeRecord(d.home.VM(testID).QEMUJSON(), rec); err != nil {
		t.Fatal(err)
	}
}

func TestObserveStates(t *testing.T) {
	boot := home.Stamp{BootID: "boot-a", HostUptimeS: 1000}
	ctx := context.Background()

	t.Run("no record is STOPPED", func(t *testing.T) {
		d := testDriver(t, &boot)
		obs, err := d.Observe(ctx, testID)
		if err != nil || obs.State != driver.Stopped || obs.Exited || obs.StaleBoot {
			t.Errorf("Observe() = %+v, %v; want plain Stopped", obs, err)
		}
	})

	t.Run("unparsable qemu.json is ERROR, never STOPPED", func(t *testing.T) {
		d := testDriver(t, &boot)
		os.WriteFile(d.home.VM(testID).QEMUJSON(), []byte(`{"pid": 12`), 0o600)
		obs, err := d.Observe(ctx, testID)
		if err != nil || obs.State != driver.Error || obs.Problem == "" {
			t.Fatalf("Observe() = %+v, %v; want Error with a problem", obs, err)
		}
		if _, err := d.Start(ctx, driver.Spec{ID: testID, CPUs: 1, MemoryMiB: 128, RuntimeImage: "r"}); !errors.Is(err, driver.ErrVMError) {
			t.Errorf("Start() on an unparsable record = %v, want ErrVMError (a second QEMU would corrupt the disk)", err)
		}
		if err := d.Destroy(ctx, testID); !errors.Is(err, driver.ErrVMError) {
			t.Errorf("Destroy() on an unparsable record = %v, want ErrVMError", err)
		}
	})

	t.Run("our process listening on its port is RUNNING", func(t *testing.T) {
		d := testDriver(t, &boot)
		p, ticks := bystander(t)
		l := foreignListener(t)
		writeTestRecord(t, d, record{PID: p.Process.Pid, GuestPort: l.port, Stamp: boot, ProcStartTicks: ticks})
		obs, err := d.Observe(ctx, testID)
		if err != nil || obs.State != driver.Running || obs.PID != p.Process.Pid || obs.GuestPort != l.port {
			t.Errorf("Observe() = %+v, %v; want Running with the record's pid and port", obs, err)
		}
	})

	t.Run("recycled pid is STOPPED and never killed", func(t *testing.T) {
		d := testDriver(t, &boot)
		p, ticks := bystander(t)
		l := foreignListener(t)
		// The record's process started at another time: the pid now
		// belongs to another process, even though the port listens.
		writeTestRecord(t, d, record{PID: p.Process.Pid, GuestPort: l.port, Stamp: boot, ProcStartTicks: ticks + 1})
		obs, err := d.Observe(ctx, testID)
		if err != nil || obs.State != driver.Stopped || !obs.Exited {
			t.Fatalf("Observe() = %+v, %v; want Stopped and Exited", obs, err)
		}
		if err := d.Destroy(ctx, testID); err != nil {
			t.Fatal(err)
		}
		if !alive(t, p.Process.Pid) {
			t.Error("Destroy() killed the process that inherited the pid")
		}
		if l.sawAuth.Load() {
			t.Error("the foreign listener was sent a token")
		}
	})

	t.Run("gone pid with a foreign listener on its port is STOPPED; stop sends it nothing", func(t *testing.T) {
		d := testDriver(t, &boot)
		l := foreignListener(t)
		writeTestRecord(t, d, record{PID: deadPID(t), GuestPort: l.port, Stamp: boot})
		obs, err := d.Observe(ctx, testID)
		if err != nil || obs.State != driver.Stopped || !obs.Exited {
			t.Fatalf("Observe() = %+v, %v; want Stopped and Exited", obs, err)
		}
		before := l.conns.Load()
		res, err := stopVM(ctx, d, testID, testToken, testGrace)
		if err != nil || res.WasRunning || res.Killed || !errors.Is(res.PoweroffErr, driver.ErrNotRunning) {
			t.Errorf("stopVM() = %+v, %v; want nothing to stop, the poweroff refused as not running", res, err)
		}
		if l.conns.Load() != before || l.sawAuth.Load() {
			t.Errorf("the stop talked to the foreign listener (%d new connections, token seen %v)", l.conns.Load()-before, l.sawAuth.Load())
		}
		if _, err := os.Stat(d.home.VM(testID).QEMUJSON()); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the stop left the dead record behind: %v", err)
		}
	})

	t.Run("live pid not listening is ERROR and never killed", func(t *testing.T) {
		d := testDriver(t, &boot)
		p, ticks := bystander(t)
		port, _ := freePort()
		writeTestRecord(t, d, record{PID: p.Process.Pid, GuestPort: port, Stamp: boot, ProcStartTicks: ticks})
		obs, err := d.Observe(ctx, testID)
		if err != nil || obs.State != driver.Error {
			t.Fatalf("Observe() = %+v, %v; want Error", obs, err)
		}
		if res, err := stopVM(ctx, d, testID, testToken, testGrace); !errors.Is(err, driver.ErrVMError) || !errors.Is(res.PoweroffErr, driver.ErrNotRunning) {
			t.Errorf("stopVM() = %+v, %v; want the poweroff refused as not running and the kill refused with ErrVMError", res, err)
		}
		if err := d.Destroy(ctx, testID); !errors.Is(err, driver.ErrVMError) {
			t.Errorf("Destroy() = %v, want ErrVMError", err)
		}
		if !alive(t, p.Process.Pid) {
			t.Error("a process that could not be proven to be QEMU was killed")
		}
	})

	t.Run("a fresh record whose QEMU does not listen yet is RUNNING and still never killed", func(t *testing.T) {
		d := testDriver(t, &boot)
		p, ticks := bystander(t)
		port, _ := freePort()
		// Written a moment ago: QEMU opens its port just after it starts,
		// and an agent that restarted right then must not call it ERROR.
		writeTestRecord(t, d, record{PID: p.Process.Pid, GuestPort: port, Stamp: boot, ProcStartTicks: ticks, StartedAt: time.Now()})
		obs, err := d.Observe(ctx, testID)
		if err != nil || obs.State != driver.Running {
			t.Fatalf("Observe() = %+v, %v; want Running", obs, err)
		}
		if _, err := d.Kill(ctx, testID); !errors.Is(err, driver.ErrVMError) {
			t.Errorf("Kill() = %v, want ErrVMError: the kill rule wants the port", err)
		}
		if !alive(t, p.Process.Pid) {
			t.Error("a process not proven by its port was killed")
		}
	})

	t.Run("record from before a host restart is STOPPED without trusting its pid", func(t *testing.T) {
		now := boot
		d := testDriver(t, &now)
		p, ticks := bystander(t)
		l := foreignListener(t)
		// Everything about the process matches, but the record was written
		// in another boot: after a restart the pid means nothing.
		writeTestRecord(t, d, record{PID: p.Process.Pid, GuestPort: l.port, Stamp: boot, ProcStartTicks: ticks})
		now = home.Stamp{BootID: "boot-b", HostUptimeS: 30}
		obs, err := d.Observe(ctx, testID)
		if err != nil || obs.State != driver.Stopped || !obs.StaleBoot || obs.Exited {
			t.Fatalf("Observe() = %+v, %v; want Stopped and StaleBoot", obs, err)
		}
		if res, err := stopVM(ctx, d, testID, testToken, testGrace); err != nil || res.WasRunning || res.Killed {
			t.Errorf("stopVM() = %+v, %v; want nothing stopped", res, err)
		}
		if _, err := os.Stat(d.home.VM(testID).QEMUJSON()); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the stop left the record of the earlier boot behind: %v", err)
		}
		if !alive(t, p.Process.Pid) || l.sawAuth.Load() {
			t.Errorf("after a faked reboot the pid's process was killed (%v) or the listener saw the token (%v)", !alive(t, p.Process.Pid), l.sawAuth.Load())
		}
		// Without boot ids, uptime alone tells: a record with more uptime
		// than the host has now is from an earlier boot.
		writeTestRecord(t, d, record{PID: p.Process.Pid, GuestPort: l.port, Stamp: home.Stamp{HostUptimeS: 500}, ProcStartTicks: ticks})
		now = home.Stamp{HostUptimeS: 30}
		if obs, _ := d.Observe(ctx, testID); obs.State != driver.Stopped || !obs.StaleBoot {
			t.Errorf("uptime-only Observe() = %+v; want Stopped and StaleBoot", obs)
		}
	})
}

// fakeGuest is an HTTP listener that proves with a token and accepts a
// poweroff, standing in for a guest whose QEMU is a sleep: it exits only when
// onPoweroff makes it.
func fakeGuest(t *testing.T, proveWith string, onPoweroff func()) (int, *atomic.Int32) {
	var poweroffs atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+protocol.PathProof, func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(protocol.ProofResponse{Proof: protocol.ComputeProof(proveWith, r.URL.Query().Get(protocol.QueryNonce))})
	})
	mux.HandleFunc("POST "+protocol.PathPoweroff, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+testToken {
			w.WriteHeader(401)
			return
		}
		poweroffs.Add(1)
		w.WriteHeader(http.StatusAccepted)
		json.NewEncoder(w).Encode(protocol.PoweroffResponse{Status: protocol.PoweroffStatus})
		if onPoweroff != nil {
			go onPoweroff()
		}
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().(*net.TCPAddr).Port, &poweroffs
}

// testGrace is how long a fake guest asked to power off has before it is
// killed: the fakes' processes exit by themselves only when told to.
const testGrace = 300 * time.Millisecond

func TestStopThroughThePrimitives(t *testing.T) {
	boot := home.Stamp{BootID: "boot-a", HostUptimeS: 1000}
	ctx := context.Background()
	tests := map[string]struct {
		reason string
		// proveWith is the token the listener on the guest port proves with.
		proveWith string
		// exits: the process goes when its fake guest accepts the poweroff.
		exits           bool
		want            stopped
		wantPoweroffErr error
		wantPoweroffs   int32
	}{
		"guest powers itself off": {
			"the guest accepts the poweroff and its QEMU exits by itself: nothing is killed, the record is cleared",
			testToken, true, stopped{WasRunning: true, PoweredOff: true}, nil, 1},
		"guest accepts but never exits": {
			"QEMU still runs when the grace has passed: it is killed under the kill rule",
			testToken, false, stopped{WasRunning: true, Killed: true}, nil, 1},
		"listener cannot prove the token": {
			"something on the port answers the proof with another token: it passes the kill rule (pid alive, port listening) but is not trusted with the token, so no poweroff reaches it and the process is killed at once",
			strings.Repeat("f", 32), false, stopped{WasRunning: true, Killed: true}, guestclient.ErrGuestUnproven, 0},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			d := testDriver(t, &boot)
			p, ticks := bystander(t)
			var onPoweroff func()
			if tc.exits {
				onPoweroff = func() { p.Process.Kill() }
			}
			port, poweroffs := fakeGuest(t, tc.proveWith, onPoweroff)
			writeTestRecord(t, d, record{PID: p.Process.Pid, GuestPort: port, Stamp: boot, ProcStartTicks: ticks})

			res, err := stopVM(ctx, d, testID, testToken, testGrace)
			if err != nil {
				t.Fatalf("%s: stopVM() = %v", tc.reason, err)
			}
			if !errors.Is(res.PoweroffErr, tc.wantPoweroffErr) {
				t.Errorf("%s: Poweroff() = %v, want %v", tc.reason, res.PoweroffErr, tc.wantPoweroffErr)
			}
			// How long the poweroff took is a figure, not a result.
			res.PoweroffErr, res.Took = nil, 0
			if diff := cmp.Diff(tc.want, res); diff != "" {
				t.Errorf("%s: stopVM() mismatch (-want +got):\n%s", tc.reason, diff)
			}
			if got := poweroffs.Load(); got != tc.wantPoweroffs {
				t.Errorf("%s: the guest got %d poweroff requests, want %d", tc.reason, got, tc.wantPoweroffs)
			}
			if alive(t, p.Process.Pid) {
				t.Errorf("%s: the process still runs after the stop", tc.reason)
			}
			if _, err := os.Stat(d.home.VM(testID).QEMUJSON()); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s: qemu.json after the stop: %v, want removed", tc.reason, err)
			}
			if _, err := d.Health(ctx, testID, testToken); !errors.Is(err, driver.ErrNotRunning) {
				t.Errorf("%s: Health() of a stopped VM = %v, want ErrNotRunning", tc.reason, err)
			}
		})
	}
}

func TestStopRechecksTheRuleBeforeKilling(t *testing.T) {
	boot := home.Stamp{BootID: "boot-a", HostUptimeS: 1000}
	ctx := context.Background()
	d := testDriver(t, &boot)
	p, ticks := bystander(t)
	var closeOnce sync.Once
	var srvLn net.Listener
	// The guest accepts the poweroff, then its port stops listening while
	// the process lives on: at the kill, the rule no longer holds.
	port, poweroffs := fakeGuestWithListener(t, &srvLn, func() { closeOnce.Do(func() { srvLn.Close() }) })
	writeTestRecord(t, d, record{PID: p.Process.Pid, GuestPort: port, Stamp: boot, ProcStartTicks: ticks})

	res, err := stopVM(ctx, d, testID, testToken, testGrace)
	if !errors.Is(err, driver.ErrVMError) || res.PoweroffErr != nil || !res.WasRunning || poweroffs.Load() != 1 {
		t.Errorf("stopVM() = %+v, %v after %d poweroffs; want the poweroff accepted, then a refusal to kill (ErrVMError)", res, err, poweroffs.Load())
	}
	if !alive(t, p.Process.Pid) {
		t.Error("the process was killed although the kill rule failed right before the kill")
	}
	if _, err := os.Stat(d.home.VM(testID).QEMUJSON()); err != nil {
		t.Errorf("the record of a process that is not proven gone was removed: %v", err)
	}
}

func fakeGuestWithListener(t *testing.T, lnOut *net.Listener, onPoweroff func()) (int, *atomic.Int32) {
	var poweroffs atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+protocol.PathProof, func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(protocol.ProofResponse{Proof: protocol.ComputeProof(testToken, r.URL.Query().Get(protocol.QueryNonce))})
	})
	mux.HandleFunc("POST "+protocol.PathPoweroff, func(w http.ResponseWriter, r *http.Request) {
		poweroffs.Add(1)
		// The port stops listening before the answer goes out, so the kill
		// rule is sure to fail at the kill (no timing involved).
		onPoweroff()
		w.WriteHeader(http.StatusAccepted)
		json.NewEncoder(w).Encode(protocol.PoweroffResponse{Status: protocol.PoweroffStatus})
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	*lnOut = ln
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().(*net.TCPAddr).Port, &poweroffs
}

// TestKillUnderTheRule: Kill kills only what the kill rule proves to be this
// VM's QEMU, clears a record whose process is gone or from an earlier boot
// without touching the pid's process, and refuses a VM in Error.
func TestKillUnderTheRule(t *testing.T) {
	boot := home.Stamp{BootID: "boot-a", HostUptimeS: 1000}
	ctx := context.Background()
	// Each setup writes the VM's record and returns the pid it names (0:
	// none).
	running := func(t *testing.T, d *Driver, _ *home.Stamp) int {
		p, ticks := bystander(t)
		writeTestRecord(t, d, record{PID: p.Process.Pid, GuestPort: foreignListener(t).port, Stamp: boot, ProcStartTicks: ticks})
		return p.Process.Pid
	}
	tests := map[string]struct {
		reason     string
		setup      func(t *testing.T, d *Driver, now *home.Stamp) int
		want       driver.KillResult
		wantErr    error
		wantRecord bool // qemu.json is still there after the kill
		wantAlive  bool // the record's process still runs after the kill
	}{
		"no record": {
			"a VM that never ran has nothing to kill",
			func(*testing.T, *Driver, *home.Stamp) int { return 0 },
			driver.KillResult{Gone: true}, nil, false, false},
		"running": {
			"a process alive with the recorded start time, this user's, listening on its port is this VM's QEMU: killed, its record cleared",
			running,
			driver.KillResult{WasRunning: true, Gone: true}, nil, false, false},
		"gone pid": {
			"a stale record whose process exited is cleared, so a pid recycled later cannot make it look alive",
			func(t *testing.T, d *Driver, _ *home.Stamp) int {
				pid := deadPID(t)
				writeTestRecord(t, d, record{PID: pid, GuestPort: foreignListener(t).port, Stamp: boot})
				return pid
			},
			driver.KillResult{Gone: true}, nil, false, false},
		"recycled pid": {
			"the pid belongs to another process now (another start time): the record is cleared, the process is not touched",
			func(t *testing.T, d *Driver, _ *home.Stamp) int {
				p, ticks := bystander(t)
				writeTestRecord(t, d, record{PID: p.Process.Pid, GuestPort: foreignListener(t).port, Stamp: boot, ProcStartTicks: ticks + 1})
				return p.Process.Pid
			},
			driver.KillResult{Gone: true}, nil, false, true},
		"record from before a host restart": {
			"after a restart the record's pid means nothing: the record is cleared, the process is not touched",
			func(t *testing.T, d *Driver, now *home.Stamp) int {
				pid := running(t, d, now)
				*now = home.Stamp{BootID: "boot-b", HostUptimeS: 30}
				return pid
			},
			driver.KillResult{Gone: true}, nil, false, true},
		"live pid not listening": {
			"a live process that does not listen on the guest port cannot be proven to be QEMU: ERROR, never killed, its record kept",
			func(t *testing.T, d *Driver, _ *home.Stamp) int {
				p, ticks := bystander(t)
				port, _ := freePort()
				writeTestRecord(t, d, record{PID: p.Process.Pid, GuestPort: port, Stamp: boot, ProcStartTicks: ticks})
				return p.Process.Pid
			},
			driver.KillResult{}, driver.ErrVMError, true, true},
		"unparsable record": {
			"a record that does not parse is ERROR: a QEMU may still run on the disk, so nothing is cleared",
			func(t *testing.T, d *Driver, _ *home.Stamp) int {
				if err := os.WriteFile(d.home.VM(testID).QEMUJSON(), []byte(`{"pid": 12`), 0o600); err != nil {
					t.Fatal(err)
				}
				return 0
			},
			driver.KillResult{}, driver.ErrVMError, true, false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			now := boot
			d := testDriver(t, &now)
			pid := tc.setup(t, d, &now)
			got, err := d.Kill(ctx, testID)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("%s: Kill() = %+v, %v; want error %v", tc.reason, got, err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("%s: Kill() = %+v, want %+v", tc.reason, got, tc.want)
			}
			_, statErr := os.Stat(d.home.VM(testID).QEMUJSON())
			if hasRecord := statErr == nil; hasRecord != tc.wantRecord {
				t.Errorf("%s: after Kill() qemu.json exists = %v, want %v", tc.reason, hasRecord, tc.wantRecord)
			}
			if pid != 0 && alive(t, pid) != tc.wantAlive {
				t.Errorf("%s: after Kill() the record's process runs = %v, want %v", tc.reason, !tc.wantAlive, tc.wantAlive)
			}
			if err != nil {
				return
			}
			// Kill is idempotent: once gone, a second one finds nothing.
			if again, err := d.Kill(ctx, testID); err != nil || again != (driver.KillResult{Gone: true}) {
				t.Errorf("%s: second Kill() = %+v, %v; want {Gone: true}", tc.reason, again, err)
			}
		})
	}
}
