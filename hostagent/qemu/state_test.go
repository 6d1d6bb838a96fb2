package qemu

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
	d := &Driver{
		home: h, boot: func() (home.Stamp, error) { return *boot, nil }, guest: guestclient.New(), environ: os.Environ,
		ListenTimeout: 5 * time.Second, AliveCheck: 100 * time.Millisecond,
		PoweroffGrace: 300 * time.Millisecond, KillGrace: 5 * time.Second, PoweroffCall: 2 * time.Second,
		StartAttempts: 1, pollInterval: 20 * time.Millisecond, pickPort: freePort,
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
		res, err := d.Stop(ctx, testID, testToken)
		if err != nil || res.WasRunning {
			t.Errorf("Stop() = %+v, %v; want nothing to stop", res, err)
		}
		if l.conns.Load() != before || l.sawAuth.Load() {
			t.Errorf("Stop() talked to the foreign listener (%d new connections, token seen %v)", l.conns.Load()-before, l.sawAuth.Load())
		}
		if _, err := os.Stat(d.home.VM(testID).QEMUJSON()); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("Stop() left the dead record behind: %v", err)
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
		if _, err := d.Stop(ctx, testID, testToken); !errors.Is(err, driver.ErrVMError) {
			t.Errorf("Stop() = %v, want ErrVMError", err)
		}
		if err := d.Destroy(ctx, testID); !errors.Is(err, driver.ErrVMError) {
			t.Errorf("Destroy() = %v, want ErrVMError", err)
		}
		if !alive(t, p.Process.Pid) {
			t.Error("a process that could not be proven to be QEMU was killed")
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
		if res, err := d.Stop(ctx, testID, testToken); err != nil || res.WasRunning || res.Killed {
			t.Errorf("Stop() = %+v, %v; want nothing stopped", res, err)
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
// poweroff, standing in for a guest whose QEMU (here a sleep) does not exit.
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

func TestStopKillsAfterGraceUnderTheRule(t *testing.T) {
	boot := home.Stamp{BootID: "boot-a", HostUptimeS: 1000}
	ctx := context.Background()
	d := testDriver(t, &boot)
	p, ticks := bystander(t)
	port, poweroffs := fakeGuest(t, testToken, nil)
	writeTestRecord(t, d, record{PID: p.Process.Pid, GuestPort: port, Stamp: boot, ProcStartTicks: ticks})

	res, err := d.Stop(ctx, testID, testToken)
	if err != nil {
		t.Fatal(err)
	}
	if !res.WasRunning || res.PoweredOff || !res.Killed || poweroffs.Load() != 1 {
		t.Errorf("Stop() = %+v after %d poweroffs; want one poweroff, then a kill after the grace", res, poweroffs.Load())
	}
	if alive(t, p.Process.Pid) {
		t.Error("the process still runs after Stop()")
	}
}

func TestStopRechecksTheRuleBeforeKilling(t *testing.T) {
	boot := home.Stamp{BootID: "boot-a", HostUptimeS: 1000}
	ctx := context.Background()
	d := testDriver(t, &boot)
	p, ticks := bystander(t)
	var port int
	var closeOnce sync.Once
	var srvLn net.Listener
	// The guest accepts the poweroff, then its port stops listening while
	// the process lives on: at the kill, the rule no longer holds.
	port, _ = fakeGuestWithListener(t, &srvLn, func() { closeOnce.Do(func() { srvLn.Close() }) })
	writeTestRecord(t, d, record{PID: p.Process.Pid, GuestPort: port, Stamp: boot, ProcStartTicks: ticks})

	_, err := d.Stop(ctx, testID, testToken)
	if !errors.Is(err, driver.ErrVMError) {
		t.Errorf("Stop() = %v, want a refusal to kill (ErrVMError)", err)
	}
	if !alive(t, p.Process.Pid) {
		t.Error("the process was killed although the kill rule failed right before the kill")
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

func TestStopNeverSendsTokenToUnprovenListener(t *testing.T) {
	boot := home.Stamp{BootID: "boot-a", HostUptimeS: 1000}
	ctx := context.Background()
	d := testDriver(t, &boot)
	p, ticks := bystander(t)
	// Something on the port that answers the proof with another token: it
	// passes the kill rule (pid alive, port listening) but is not trusted
	// with the token, so no poweroff reaches it and the process is killed.
	port, poweroffs := fakeGuest(t, "ffffffffffffffffffffffffffffffff", nil)
	writeTestRecord(t, d, record{PID: p.Process.Pid, GuestPort: port, Stamp: boot, ProcStartTicks: ticks})
	res, err := d.Stop(ctx, testID, testToken)
	if err != nil || !res.Killed || res.PoweredOff {
		t.Errorf("Stop() = %+v, %v; want killed without a poweroff", res, err)
	}
	if poweroffs.Load() != 0 {
		t.Errorf("the unproven listener got %d poweroff requests", poweroffs.Load())
	}
	if _, err := d.Health(ctx, testID, testToken); err == nil {
		t.Error("Health() of a stopped VM: want an error")
	}
}
