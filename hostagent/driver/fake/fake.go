// Package fake holds test doubles of driver.Driver: DriverFns, a one-line
// fake from functions (crossplane's ExternalClientFns habit), and Host, an
// in-memory host whose VMs start, stop and crash on command, for reconciler
// tests and the 100-Computer benchmark. Nothing here runs a process.
package fake

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/hostagent/driver"
	"github.com/invisible-dots/invisible-dots/internal/home"
)

// DriverFns implements driver.Driver with one function per method. A nil
// function observes a stopped, unprovisioned VM and succeeds at everything.
type DriverFns struct {
	ObserveFn func(ctx context.Context, id home.VMID) (driver.Observation, error)
	StartFn   func(ctx context.Context, spec driver.Spec) (driver.Observation, error)
	StopFn    func(ctx context.Context, id home.VMID, token string) (driver.StopResult, error)
	RebootFn  func(ctx context.Context, spec driver.Spec) (driver.Observation, error)
	DestroyFn func(ctx context.Context, id home.VMID) error
	HealthFn  func(ctx context.Context, id home.VMID, token string) (protocol.HealthResponse, error)
}

var _ driver.Driver = DriverFns{}

func (f DriverFns) Observe(ctx context.Context, id home.VMID) (driver.Observation, error) {
	if f.ObserveFn == nil {
		return driver.Observation{State: driver.Stopped}, nil
	}
	return f.ObserveFn(ctx, id)
}

func (f DriverFns) Start(ctx context.Context, spec driver.Spec) (driver.Observation, error) {
	if f.StartFn == nil {
		return driver.Observation{Provisioned: true, State: driver.Running}, nil
	}
	return f.StartFn(ctx, spec)
}

func (f DriverFns) Stop(ctx context.Context, id home.VMID, token string) (driver.StopResult, error) {
	if f.StopFn == nil {
		return driver.StopResult{}, nil
	}
	return f.StopFn(ctx, id, token)
}

func (f DriverFns) Reboot(ctx context.Context, spec driver.Spec) (driver.Observation, error) {
	if f.RebootFn == nil {
		return driver.Observation{Provisioned: true, State: driver.Running}, nil
	}
	return f.RebootFn(ctx, spec)
}

func (f DriverFns) Destroy(ctx context.Context, id home.VMID) error {
	if f.DestroyFn == nil {
		return nil
	}
	return f.DestroyFn(ctx, id)
}

// Health implements driver.Driver; nil answers a healthy guest without an
// engine.
func (f DriverFns) Health(ctx context.Context, id home.VMID, token string) (protocol.HealthResponse, error) {
	if f.HealthFn == nil {
		return protocol.HealthResponse{Agentd: protocol.AgentdOK, Agent: json.RawMessage("null")}, nil
	}
	return f.HealthFn(ctx, id, token)
}

// Host is an in-memory host: Start makes a VM Running with a fresh pid and
// port, Stop powers it off, Crash makes it exit unasked, Reboot fakes a host
// restart. Safe for concurrent use.
type Host struct {
	mu      sync.Mutex
	boot    home.Stamp
	nextPID int
	vms     map[home.VMID]*vm
	calls   map[string]int
	// FailStart, when set, is returned by Start for that VM (a start failure
	// for crash-loop backoff tests).
	FailStart map[home.VMID]error
	// Unhealthy, when set, is returned by Health for that VM (a guest that
	// never comes up).
	Unhealthy map[home.VMID]error
}

type vm struct {
	spec  driver.Spec
	obs   driver.Observation
	specs int
}

// NewHost returns an empty fake host on boot "boot-1".
func NewHost() *Host {
	return &Host{
		boot:      home.Stamp{BootID: "boot-1", HostUptimeS: 100},
		nextPID:   1000,
		vms:       map[home.VMID]*vm{},
		calls:     map[string]int{},
		FailStart: map[home.VMID]error{},
		Unhealthy: map[home.VMID]error{},
	}
}

var _ driver.Driver = (*Host)(nil)

// Calls returns how many times a method ("Start", "Stop", ...) was called.
func (h *Host) Calls(method string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.calls[method]
}

// Observe implements driver.Driver.
func (h *Host) Observe(_ context.Context, id home.VMID) (driver.Observation, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls["Observe"]++
	v, ok := h.vms[id]
	if !ok {
		return driver.Observation{State: driver.Stopped}, nil
	}
	obs := v.obs
	if obs.State == driver.Running && !h.boot.SameBoot(obs.Boot) {
		obs = driver.Observation{Provisioned: true, State: driver.Stopped, StaleBoot: true, Boot: obs.Boot,
			GoldenImage: obs.GoldenImage, RuntimeImage: obs.RuntimeImage}
	}
	return obs, nil
}

// Start implements driver.Driver.
func (h *Host) Start(_ context.Context, spec driver.Spec) (driver.Observation, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls["Start"]++
	if err := h.FailStart[spec.ID]; err != nil {
		return driver.Observation{}, err
	}
	v, ok := h.vms[spec.ID]
	if ok && v.obs.State == driver.Running && h.boot.SameBoot(v.obs.Boot) {
		return v.obs, nil
	}
	if !ok {
		v = &vm{}
		h.vms[spec.ID] = v
	}
	h.nextPID++
	v.spec = spec
	v.obs = driver.Observation{
		Provisioned: true, State: driver.Running, PID: h.nextPID, GuestPort: 20000 + h.nextPID%40000,
		Boot: h.boot, GoldenImage: spec.GoldenImage, RuntimeImage: spec.RuntimeImage,
		CPUs: spec.CPUs, MemoryMiB: spec.MemoryMiB,
	}
	return v.obs, nil
}

// Stop implements driver.Driver.
func (h *Host) Stop(_ context.Context, id home.VMID, _ string) (driver.StopResult, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls["Stop"]++
	v, ok := h.vms[id]
	if !ok || v.obs.State != driver.Running {
		if ok {
			v.obs = driver.Observation{Provisioned: true, State: driver.Stopped,
				GoldenImage: v.obs.GoldenImage, RuntimeImage: v.obs.RuntimeImage}
		}
		return driver.StopResult{}, nil
	}
	v.obs = driver.Observation{Provisioned: true, State: driver.Stopped,
		GoldenImage: v.obs.GoldenImage, RuntimeImage: v.obs.RuntimeImage}
	return driver.StopResult{WasRunning: true, PoweredOff: true}, nil
}

// Reboot implements driver.Driver.
func (h *Host) Reboot(ctx context.Context, spec driver.Spec) (driver.Observation, error) {
	if _, err := h.Stop(ctx, spec.ID, spec.Token); err != nil {
		return driver.Observation{}, err
	}
	return h.Start(ctx, spec)
}

// Destroy implements driver.Driver.
func (h *Host) Destroy(_ context.Context, id home.VMID) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls["Destroy"]++
	delete(h.vms, id)
	return nil
}

// Health implements driver.Driver: a running VM answers healthy, with the
// engine's answer {"status":"ok"}.
func (h *Host) Health(_ context.Context, id home.VMID, _ string) (protocol.HealthResponse, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls["Health"]++
	v, ok := h.vms[id]
	if !ok || v.obs.State != driver.Running || !h.boot.SameBoot(v.obs.Boot) {
		return protocol.HealthResponse{}, fmt.Errorf("fake host: %s: %w", id, driver.ErrNotRunning)
	}
	if err := h.Unhealthy[id]; err != nil {
		return protocol.HealthResponse{}, err
	}
	return protocol.HealthResponse{Agentd: protocol.AgentdOK, Agent: json.RawMessage(`{"status":"ok"}`), UptimeS: 1}, nil
}

// Crash makes a running VM exit unasked (QEMU killed, guest powered itself
// off): Observe then reports Stopped with Exited.
func (h *Host) Crash(id home.VMID) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	v, ok := h.vms[id]
	if !ok || v.obs.State != driver.Running {
		return fmt.Errorf("fake host: vm %s is not running", id)
	}
	v.obs.State = driver.Stopped
	v.obs.Exited = true
	v.obs.ExitStatus = "signal: killed"
	return nil
}

// SetState forces a VM's observation (an Error state, a foreign listener).
func (h *Host) SetState(id home.VMID, obs driver.Observation) {
	h.mu.Lock()
	defer h.mu.Unlock()
	v, ok := h.vms[id]
	if !ok {
		v = &vm{}
		h.vms[id] = v
	}
	v.obs = obs
}

// RebootHost fakes a host restart: a new boot id, uptime from zero. Every
// running VM's record becomes stale.
func (h *Host) RebootHost() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.boot = home.Stamp{BootID: h.boot.BootID + "+", HostUptimeS: 1}
}

// Running lists the VMs that are running now, for assertions.
func (h *Host) Running() []home.VMID {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []home.VMID
	for id, v := range h.vms {
		if v.obs.State == driver.Running && h.boot.SameBoot(v.obs.Boot) {
			out = append(out, id)
		}
	}
	return out
}
