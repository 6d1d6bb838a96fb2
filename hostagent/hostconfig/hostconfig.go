// Package hostconfig reads and writes $HOME/config/host.yaml: the decisions
// about this host's QEMU that DESIGN.md 5 records instead of guessing at run
// time. The accelerator is kvm unless the file says tcg (test hosts only,
// never chosen automatically). The CPU model is host,-vmx,-svm unless setup
// recorded the override that the doctor's probe needs on nested
// virtualization hosts.
package hostconfig

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/google/renameio/v2"
	"sigs.k8s.io/yaml"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/home"
)

// Accelerators.
const (
	KVM = "kvm"
	TCG = "tcg"
)

// CPU models (ref 3.4; DESIGN.md 5).
const (
	// CPUModel is the host's CPU without the virtualization extensions: a Dot
	// never runs a hypervisor.
	CPUModel = "host,-vmx,-svm"
	// CPUModelNoArchCapabilities is the recorded override for hosts where KVM
	// refuses the first (measured on nested virtualization: "failed to set
	// MSR 0x10a"). setup records it only after the probe passes with it.
	CPUModelNoArchCapabilities = "host,-vmx,-svm,-arch-capabilities"
	// CPUModelTCG is the model under tcg: TCG cannot emulate "host" ("CPU
	// model 'host' requires KVM or HVF", QEMU 7.2). Not "max,-vmx,-svm":
	// measured with QEMU 7.2 TCG on an AMD EPYC host, that model makes the
	// test image's static glibc programs (busybox) abort at start
	// ("_dl_get_origin: Assertion `linkval[0] == '/'' failed"), while "max",
	// "max,-vmx" and "qemu64,-svm" boot it. qemu64 is the plain x86-64 model,
	// again without the virtualization extensions.
	CPUModelTCG = "qemu64,-vmx,-svm"
)

// MinQEMU is the oldest QEMU accepted: Debian 12's own package (DESIGN.md 5).
var MinQEMU = Version{7, 2, 0}

// Version is a QEMU version.
type Version struct{ Major, Minor, Patch int }

func (v Version) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch) }

// Less reports whether v is older than w.
func (v Version) Less(w Version) bool {
	if v.Major != w.Major {
		return v.Major < w.Major
	}
	if v.Minor != w.Minor {
		return v.Minor < w.Minor
	}
	return v.Patch < w.Patch
}

// Config is host.yaml.
type Config struct {
	// Accelerator is "kvm" (the default when empty) or "tcg".
	Accelerator string `json:"accelerator,omitempty"`
	// CPUModel overrides the CPU model; empty means the default for the
	// accelerator.
	CPUModel string `json:"cpuModel,omitempty"`
	// CPUModelReason says why the override was recorded (setup writes the
	// probe's error that the default met).
	CPUModelReason string `json:"cpuModelReason,omitempty"`
	// OpenRouterURL is the base URL of OpenRouter's API every guest of this
	// host uses; empty means protocol.DefaultOpenRouterURL. Tests point it at
	// a stand-in on the host's loopback, which a guest reaches as 10.0.2.2
	// (http://10.0.2.2:PORT/api/v1). It reaches a guest through its seed, so
	// a change applies from each VM's next start (and the agent's restart).
	OpenRouterURL string `json:"openrouterURL,omitempty"`
	// ExitEchoURLs are the address-echo services a browser launch in a
	// guest asks for the exit's address, so the browser's time zone and
	// locale follow it (ref 6); empty means api.ipify.org, icanhazip.com
	// and checkip.amazonaws.com. A person who would rather not ask them
	// names their own; tests name a stand-in. Applies from each VM's next
	// start, like openrouterURL.
	ExitEchoURLs []string `json:"exitEchoURLs,omitempty"`
	// WakeLead is how long before one of its automations is due a
	// sleeping Computer of this host is started (ref 9.5), a Go duration
	// (90s); empty means lifecycle.DefaultWakeLead. A host whose guests
	// boot slowly wants more. The host agent reports it on its Host, where
	// the control plane reads it.
	WakeLead string `json:"wakeLead,omitempty"`
}

// MaxWakeLead bounds WakeLead: an automation wakes its computer at most this
// long before it is due.
const MaxWakeLead = time.Hour

// EffectiveWakeLead is WakeLead as a duration; 0 when it is not set (the
// control plane's default then applies). Validate refuses one that does not
// parse.
func (c Config) EffectiveWakeLead() time.Duration {
	d, _ := time.ParseDuration(c.WakeLead)
	return d
}

// EffectiveOpenRouterURL is the base URL of OpenRouter's API the guests are
// given.
func (c Config) EffectiveOpenRouterURL() string {
	if c.OpenRouterURL != "" {
		return c.OpenRouterURL
	}
	return protocol.DefaultOpenRouterURL
}

// EffectiveAccelerator is the accelerator QEMU is started with.
func (c Config) EffectiveAccelerator() string {
	if c.Accelerator == "" {
		return KVM
	}
	return c.Accelerator
}

// EffectiveCPUModel is the -cpu value QEMU is started with.
func (c Config) EffectiveCPUModel() string {
	if c.CPUModel != "" {
		return c.CPUModel
	}
	if c.EffectiveAccelerator() == TCG {
		return CPUModelTCG
	}
	return CPUModel
}

// Validate refuses what QEMU would misread or what was never decided.
func (c Config) Validate() error {
	switch c.Accelerator {
	case "", KVM, TCG:
	default:
		return fmt.Errorf("host.yaml accelerator %q is neither %q nor %q", c.Accelerator, KVM, TCG)
	}
	switch c.CPUModel {
	case "", CPUModel, CPUModelNoArchCapabilities, CPUModelTCG:
	default:
		// Only recorded decisions are accepted: a guessed model is exactly
		// what ref 3.4 rules out.
		return fmt.Errorf("host.yaml cpuModel %q is not one of the recorded models %q, %q, %q", c.CPUModel, CPUModel, CPUModelNoArchCapabilities, CPUModelTCG)
	}
	if c.EffectiveAccelerator() == TCG && strings.HasPrefix(c.CPUModel, "host") {
		return fmt.Errorf("host.yaml cpuModel %q needs kvm, but the accelerator is tcg: remove cpuModel", c.CPUModel)
	}
	if c.OpenRouterURL != "" {
		if err := protocol.ValidateOpenRouterURL(c.OpenRouterURL); err != nil {
			return fmt.Errorf("host.yaml openrouterURL: %w", err)
		}
	}
	if err := protocol.ValidateEchoURLs(c.ExitEchoURLs); err != nil {
		return fmt.Errorf("host.yaml exitEchoURLs: %w", err)
	}
	if c.WakeLead != "" {
		if d, err := time.ParseDuration(c.WakeLead); err != nil || d <= 0 || d > MaxWakeLead {
			return fmt.Errorf("host.yaml wakeLead %q is not a duration from 1s to %s (90s, 2m)", c.WakeLead, MaxWakeLead)
		}
	}
	return nil
}

// Load reads host.yaml; a missing file is the default config.
func Load(h home.Layout) (Config, error) {
	b, err := os.ReadFile(h.HostConfig())
	if errors.Is(err, os.ErrNotExist) {
		return Config{}, nil
	}
	if err != nil {
		return Config{}, fmt.Errorf("read %s: %w", h.HostConfig(), err)
	}
	var c Config
	if err := yaml.UnmarshalStrict(b, &c); err != nil {
		return Config{}, fmt.Errorf("parse %s (fix or remove it): %w", h.HostConfig(), err)
	}
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("%s: %w", h.HostConfig(), err)
	}
	return c, nil
}

// header is written above the YAML so a person reading the file knows what
// the fields mean and who writes them.
const header = `# invisible-dots host settings (DESIGN.md 5). Written by "invisible-dots setup";
# read by the server and "invisible-dots doctor".
#   accelerator: kvm (default) | tcg (test hosts only: slow, always a doctor warning)
#   cpuModel: recorded only when the default host,-vmx,-svm fails the probe
#   openrouterURL: OpenRouter's API for every guest (default ` + protocol.DefaultOpenRouterURL + `);
#     a stand-in on this host's loopback is http://10.0.2.2:PORT/... from a guest
#   exitEchoURLs: the address-echo services a browser launch asks for its exit
#     (default api.ipify.org, icanhazip.com, checkip.amazonaws.com)
`

// Save writes host.yaml atomically (temporary file, then rename), private to
// the server's user.
func Save(h home.Layout, c Config) error {
	if err := c.Validate(); err != nil {
		return err
	}
	b, err := yaml.Marshal(c)
	if err != nil {
		return fmt.Errorf("encode host.yaml: %w", err)
	}
	if err := os.MkdirAll(h.Config(), home.PrivateDirMode); err != nil {
		return fmt.Errorf("create %s: %w", h.Config(), err)
	}
	f, err := renameio.NewPendingFile(h.HostConfig(), renameio.WithTempDir(h.Config()), renameio.WithPermissions(home.PrivateFileMode))
	if err != nil {
		return fmt.Errorf("write %s: %w", h.HostConfig(), err)
	}
	defer f.Cleanup()
	if _, err := f.WriteString(header + string(b)); err != nil {
		return fmt.Errorf("write %s: %w", h.HostConfig(), err)
	}
	if err := f.CloseAtomicallyReplace(); err != nil {
		return fmt.Errorf("write %s: %w", h.HostConfig(), err)
	}
	return nil
}
