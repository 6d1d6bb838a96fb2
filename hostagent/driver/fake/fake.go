// Package fake holds test doubles of driver.Driver: DriverFns, a one-line
// fake from functions (crossplane's ExternalClientFns habit), and Host, an
// in-memory host whose VMs start, stop and crash on command, for reconciler
// tests and benchmarks. Nothing here runs a process.
package fake

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/hostagent/driver"
	"github.com/invisible-dots/invisible-dots/hostagent/guestclient"
	"github.com/invisible-dots/invisible-dots/internal/home"
)

// DriverFns implements driver.Driver, driver.SleepPreparer and
// driver.ImageLister with one function per method. A nil
// function observes a stopped, unprovisioned VM and succeeds at everything.
type DriverFns struct {
	ObserveFn  func(ctx context.Context, id home.VMID) (driver.Observation, error)
	StartFn    func(ctx context.Context, spec driver.Spec) (driver.Observation, error)
	PoweroffFn func(ctx context.Context, id home.VMID, token string) error
	// PrepareSleepFn nil: the engine prepares at once.
	PrepareSleepFn func(ctx context.Context, id home.VMID, token string) error
	KillFn         func(ctx context.Context, id home.VMID) (driver.KillResult, error)
	DestroyFn      func(ctx context.Context, id home.VMID) error
	HealthFn       func(ctx context.Context, id home.VMID, token string) (protocol.HealthResponse, error)
	// GuestTargetFn nil: no record, the VM is not running.
	GuestTargetFn func(ctx context.Context, id home.VMID, token string) (guestclient.Target, error)
	ImagesFn      func(ctx context.Context) ([]driver.Image, error)
}

var (
	_ driver.Driver        = DriverFns{}
	_ driver.SleepPreparer = DriverFns{}
	_ driver.ImageLister   = DriverFns{}
)

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

func (f DriverFns) Poweroff(ctx context.Context, id home.VMID, token string) error {
	if f.PoweroffFn == nil {
		return nil
	}
	return f.PoweroffFn(ctx, id, token)
}

func (f DriverFns) PrepareSleep(ctx context.Context, id home.VMID, token string) error {
	if f.PrepareSleepFn == nil {
		return nil
	}
	return f.PrepareSleepFn(ctx, id, token)
}

func (f DriverFns) Kill(ctx context.Context, id home.VMID) (driver.KillResult, error) {
	if f.KillFn == nil {
		return driver.KillResult{Gone: true}, nil
	}
	return f.KillFn(ctx, id)
}

func (f DriverFns) Destroy(ctx context.Context, id home.VMID) error {
	if f.DestroyFn == nil {
		return nil
	}
	return f.DestroyFn(ctx, id)
}

// Health implements driver.GuestChannel; nil answers a healthy guest without an
// engine.
func (f DriverFns) Health(ctx context.Context, id home.VMID, token string) (protocol.HealthResponse, error) {
	if f.HealthFn == nil {
		return protocol.HealthResponse{Agentd: protocol.AgentdOK, Agent: json.RawMessage("null")}, nil
	}
	return f.HealthFn(ctx, id, token)
}

// GuestTarget implements driver.GuestChannel.
func (f DriverFns) GuestTarget(ctx context.Context, id home.VMID, token string) (guestclient.Target, error) {
	if f.GuestTargetFn == nil {
		return guestclient.Target{}, fmt.Errorf("fake: %s: %w", id, driver.ErrNotRunning)
	}
	return f.GuestTargetFn(ctx, id, token)
}

// Images implements driver.ImageLister; nil has one golden and one runtime image.
func (f DriverFns) Images(ctx context.Context) ([]driver.Image, error) {
	if f.ImagesFn == nil {
		return DefaultImages, nil
	}
	return f.ImagesFn(ctx)
}

// DefaultImages are the images a fake host has unless told otherwise.
var DefaultImages = []driver.Image{{Kind: home.Golden, Version: "fake-golden"}, {Kind: home.Runtime, Version: "fake-runtime"}}

// Host is an in-memory host: Start makes a VM Running with a fresh pid and
// port, Poweroff makes it exit after PoweroffTakes, Kill ends it at once,
// Crash makes it exit unasked, RebootHost fakes a host restart. Safe for
// concurrent use.
type Host struct {
	mu      sync.Mutex
	boot    home.Stamp
	nextPID int
	vms     map[home.VMID]*vm
	calls   map[string]int
	images  []driver.Image
	// FailStart, when set, is returned by Start for that VM (a start failure
	// for crash-loop backoff tests).
	FailStart map[home.VMID]error
	// Unhealthy, when set, is returned by Health for that VM (a guest that
	// never comes up).
	Unhealthy map[home.VMID]error
	// RefusePoweroff, when set, is returned by Poweroff for that VM (a guest
	// that does not accept it).
	RefusePoweroff map[home.VMID]error
	// PoweroffTakes is how long a guest takes to power off once asked; a
	// guest told to power off keeps running until then. Zero: at once.
	PoweroffTakes time.Duration
	// Clock is the host's time (starts, poweroffs); the real clock by
	// default.
	Clock clock.PassiveClock
}

type vm struct {
	spec driver.Spec
	obs  driver.Observation
	// offAt is when a guest asked to power off exits; zero when not asked.
	offAt time.Time
}

// NewHost returns an empty fake host on boot "boot-1", with DefaultImages.
func NewHost() *Host {
	return &Host{
		boot:           home.Stamp{BootID: "boot-1", HostUptimeS: 100},
		nextPID:        1000,
		vms:            map[home.VMID]*vm{},
		calls:          map[string]int{},
		images:         DefaultImages,
		FailStart:      map[home.VMID]error{},
		Unhealthy:      map[home.VMID]error{},
		RefusePoweroff: map[home.VMID]error{},
		Clock:          clock.RealClock{},
	}
}

var (
	_ driver.Driver        = (*Host)(nil)
	_ driver.SleepPreparer = (*Host)(nil)
	_ driver.ImageLister   = (*Host)(nil)
)

// Calls returns how many times a method ("Start", "Poweroff", ...) was
// called.
func (h *Host) Calls(method string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.calls[method]
}

// SetPoweroffTakes sets how long a guest takes to power off once asked.
func (h *Host) SetPoweroffTakes(d time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.PoweroffTakes = d
}

// SetFailStart makes Start of id fail with err (nil: succeed again).
func (h *Host) SetFailStart(id home.VMID, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err == nil {
		delete(h.FailStart, id)
		return
	}
	h.FailStart[id] = err
}

// SetUnhealthy makes Health of id fail with err (nil: answer again), safe
// while a prober asks.
func (h *Host) SetUnhealthy(id home.VMID, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err == nil {
		delete(h.Unhealthy, id)
		return
	}
	h.Unhealthy[id] = err
}

// SetImages replaces the images the host has registered.
func (h *Host) SetImages(imgs []driver.Image) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.images = imgs
}

// Images implements driver.ImageLister.
func (h *Host) Images(context.Context) ([]driver.Image, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]driver.Image(nil), h.images...), nil
}

// settle makes a VM whose poweroff time has come exit. Called with mu held.
func (h *Host) settle(v *vm) {
	if v.obs.State == driver.Running && !v.offAt.IsZero() && !h.Clock.Now().Before(v.offAt) {
		v.obs.State = driver.Stopped
		v.obs.Exited = true
		v.obs.ExitStatus = "exit status 0"
		v.offAt = time.Time{}
	}
}

// Observe implements driver.Lifecycle.
func (h *Host) Observe(_ context.Context, id home.VMID) (driver.Observation, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls["Observe"]++
	v, ok := h.vms[id]
	if !ok {
		return driver.Observation{State: driver.Stopped}, nil
	}
	h.settle(v)
	obs := v.obs
	if obs.State == driver.Running && !h.boot.SameBoot(obs.Boot) {
		obs = driver.Observation{Provisioned: true, State: driver.Stopped, StaleBoot: true, Boot: obs.Boot,
			GoldenImage: obs.GoldenImage, RuntimeImage: obs.RuntimeImage}
	}
	return obs, nil
}

// Start implements driver.Lifecycle.
func (h *Host) Start(_ context.Context, spec driver.Spec) (driver.Observation, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls["Start"]++
	if err := h.FailStart[spec.ID]; err != nil {
		return driver.Observation{}, err
	}
	v, ok := h.vms[spec.ID]
	if ok {
		h.settle(v)
		if v.obs.State == driver.Running && h.boot.SameBoot(v.obs.Boot) {
			return v.obs, nil
		}
	} else {
		v = &vm{}
		h.vms[spec.ID] = v
	}
	// The golden image: the spec's, else the first registered; the runtime
	// ISO: the spec's, else the newest (versions start with their build
	// time), as the QEMU driver chooses.
	golden, runtime := spec.GoldenImage, cmp.Or(spec.RuntimeImage, driver.Newest(h.images, home.Runtime))
	for _, img := range h.images {
		if golden == "" && img.Kind == home.Golden {
			golden = img.Version
		}
	}
	if golden == "" || runtime == "" {
		return v.obs, fmt.Errorf("fake host: no image registered")
	}
	h.nextPID++
	v.spec = spec
	v.offAt = time.Time{}
	v.obs = driver.Observation{
		Provisioned: true, State: driver.Running, PID: h.nextPID, GuestPort: 20000 + h.nextPID%40000,
		Boot: h.boot, GoldenImage: golden, RuntimeImage: runtime, StartedAt: h.Clock.Now(),
		CPUs: spec.CPUs, MemoryMiB: spec.MemoryMiB,
	}
	return v.obs, nil
}

// Poweroff implements driver.GuestChannel: the guest exits PoweroffTakes later.
func (h *Host) Poweroff(_ context.Context, id home.VMID, _ string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls["Poweroff"]++
	if err := h.RefusePoweroff[id]; err != nil {
		return err
	}
	v, ok := h.vms[id]
	if !ok || v.obs.State != driver.Running {
		return fmt.Errorf("fake host: %s: %w", id, driver.ErrNotRunning)
	}
	if v.offAt.IsZero() {
		v.offAt = h.Clock.Now().Add(h.PoweroffTakes)
	}
	h.settle(v)
	return nil
}

// PrepareSleep implements driver.SleepPreparer: a running VM's engine prepares.
func (h *Host) PrepareSleep(_ context.Context, id home.VMID, _ string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls["PrepareSleep"]++
	v, ok := h.vms[id]
	if !ok || v.obs.State != driver.Running {
		return fmt.Errorf("fake host: %s: %w", id, driver.ErrNotRunning)
	}
	return nil
}

// Kill implements driver.Lifecycle: a running VM ends at once.
func (h *Host) Kill(_ context.Context, id home.VMID) (driver.KillResult, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls["Kill"]++
	v, ok := h.vms[id]
	if !ok {
		return driver.KillResult{Gone: true}, nil
	}
	h.settle(v)
	was := v.obs.State == driver.Running
	v.obs = driver.Observation{Provisioned: true, State: driver.Stopped,
		GoldenImage: v.obs.GoldenImage, RuntimeImage: v.obs.RuntimeImage}
	v.offAt = time.Time{}
	return driver.KillResult{WasRunning: was, Gone: true}, nil
}

// Destroy implements driver.Lifecycle.
func (h *Host) Destroy(_ context.Context, id home.VMID) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls["Destroy"]++
	delete(h.vms, id)
	return nil
}

// Health implements driver.GuestChannel: a running VM answers healthy, with the
// engine's answer {"status":"ok"}.
func (h *Host) Health(_ context.Context, id home.VMID, _ string) (protocol.HealthResponse, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls["Health"]++
	if _, err := h.running(id); err != nil {
		return protocol.HealthResponse{}, err
	}
	if err := h.Unhealthy[id]; err != nil {
		return protocol.HealthResponse{}, err
	}
	v := h.vms[id]
	return protocol.HealthResponse{Agentd: protocol.AgentdOK, Agent: json.RawMessage(`{"status":"ok"}`), UptimeS: 1, RuntimeVersion: v.obs.RuntimeImage}, nil
}

// GuestTarget implements driver.GuestChannel: a running VM's port and pid, its
// fake start time (StartTicks of the pid) and the host's boot id, as its
// record would give them.
func (h *Host) GuestTarget(_ context.Context, id home.VMID, token string) (guestclient.Target, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls["GuestTarget"]++
	v, err := h.running(id)
	if err != nil {
		return guestclient.Target{}, err
	}
	return guestclient.Target{Port: v.obs.GuestPort, PID: v.obs.PID, Token: token, StartTicks: StartTicks(v.obs.PID), BootID: v.obs.Boot.BootID}, nil
}

// running is the VM id when it runs in this boot, settled; otherwise an
// error wrapping driver.ErrNotRunning. The caller holds h.mu.
func (h *Host) running(id home.VMID) (*vm, error) {
	v, ok := h.vms[id]
	if ok {
		h.settle(v)
	}
	if !ok || v.obs.State != driver.Running || !h.boot.SameBoot(v.obs.Boot) {
		return nil, fmt.Errorf("fake host: %s: %w", id, driver.ErrNotRunning)
	}
	return v, nil
}

// StartTicks is the start time a fake host's QEMU of pid has.
func StartTicks(pid int) uint64 { return 1_000_000 + uint64(pid) }

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
