package hostconfig

import (
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/invisible-dots/invisible-dots/internal/home"
)

func TestLoadSave(t *testing.T) {
	h := home.Layout{Root: t.TempDir()}
	c, err := Load(h)
	if err != nil {
		t.Fatal(err)
	}
	if c.EffectiveAccelerator() != KVM || c.EffectiveCPUModel() != CPUModel {
		t.Errorf("default config = %q %q, want kvm and %q", c.EffectiveAccelerator(), c.EffectiveCPUModel(), CPUModel)
	}
	if c.EffectiveOpenRouterURL() != "https://openrouter.ai/api/v1" {
		t.Errorf("default openrouterURL = %q, want OpenRouter's own", c.EffectiveOpenRouterURL())
	}
	want := Config{CPUModel: CPUModelNoArchCapabilities, CPUModelReason: "failed to set MSR 0x10a", OpenRouterURL: "http://10.0.2.2:8999/api/v1", WakeLead: "2m"}
	if err := Save(h, want); err != nil {
		t.Fatal(err)
	}
	got, err := Load(h)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Load(Save(c)) mismatch (-want +got):\n%s", diff)
	}
	if got.EffectiveWakeLead() != 2*time.Minute || (Config{}).EffectiveWakeLead() != 0 {
		t.Errorf("wakeLead 2m reads %s, unset %s; want 2m0s and 0 (the control plane's default)", got.EffectiveWakeLead(), Config{}.EffectiveWakeLead())
	}
}

func TestLoadRefuses(t *testing.T) {
	tests := map[string]string{
		"unknown accelerator":     "accelerator: hvf\n",
		"guessed cpu model":       "cpuModel: Skylake-Client\n",
		"host model on tcg":       "accelerator: tcg\ncpuModel: host,-vmx,-svm\n",
		"unknown field":           "acceleratr: tcg\n",
		"not yaml":                "accelerator: [\n",
		"openrouterURL no scheme": "openrouterURL: openrouter.ai/api/v1\n",
		"openrouterURL ftp":       "openrouterURL: ftp://10.0.2.2/x\n",
		"openrouterURL space":     "openrouterURL: \"http://10.0.2.2/a b\"\n",
		"wakeLead not a duration": "wakeLead: soon\n",
		"wakeLead negative":       "wakeLead: -5s\n",
		"wakeLead over an hour":   "wakeLead: 2h\n",
	}
	for name, body := range tests {
		t.Run(name, func(t *testing.T) {
			h := home.Layout{Root: t.TempDir()}
			os.MkdirAll(h.Config(), 0o700)
			os.WriteFile(h.HostConfig(), []byte(body), 0o600)
			if c, err := Load(h); err == nil {
				t.Errorf("Load(%q) = %+v, want an error", body, c)
			}
		})
	}
}

func TestEffective(t *testing.T) {
	tests := map[string]struct {
		c          Config
		accel, cpu string
	}{
		"default":  {Config{}, KVM, CPUModel},
		"tcg":      {Config{Accelerator: TCG}, TCG, CPUModelTCG},
		"override": {Config{CPUModel: CPUModelNoArchCapabilities}, KVM, CPUModelNoArchCapabilities},
	}
	for name, tc := range tests {
		if a, c := tc.c.EffectiveAccelerator(), tc.c.EffectiveCPUModel(); a != tc.accel || c != tc.cpu {
			t.Errorf("%s: %+v -> %q %q, want %q %q", name, tc.c, a, c, tc.accel, tc.cpu)
		}
	}
}

func TestVersionLess(t *testing.T) {
	if !(Version{7, 1, 9}).Less(MinQEMU) || (Version{7, 2, 0}).Less(MinQEMU) || (Version{10, 0, 0}).Less(MinQEMU) {
		t.Error("Version.Less disagrees with the 7.2 minimum")
	}
}
