package protocol

import (
	"regexp"
	"strings"
	"testing"
)

// isoName is what kdomanski/iso9660 records unchanged (no Rock Ridge): its
// d1 characters, lower-case, one dot at most, 30 characters.
var isoName = regexp.MustCompile(`^[a-z0-9_-]{1,25}(\.[a-z0-9_]{1,4})?$`)

func TestSeedAndRuntimeNamesSurviveISO9660(t *testing.T) {
	for _, p := range []string{SeedMetaDataFile, SeedUserDataFile, SeedGuestConfigFile, SeedEngineEnvFile, SeedSudoersFile, RuntimeAgentdFile, RuntimeEngineFile, RuntimeManifestFile, RuntimeUnitsDir} {
		for _, n := range strings.Split(p, "/") {
			if !isoName.MatchString(n) {
				t.Errorf("name %q of %q would be changed by the ISO writer", n, p)
			}
		}
	}
	if RuntimeAgentdPath != "/opt/invisible-dots/bin/dot-agentd" {
		t.Errorf("RuntimeAgentdPath = %q: the engine's default and the units name /opt/invisible-dots/bin/dot-agentd", RuntimeAgentdPath)
	}
	if SeedVolumeLabel != "cidata" {
		t.Errorf("SeedVolumeLabel = %q: cloud-init's NoCloud looks for cidata", SeedVolumeLabel)
	}
	if !regexp.MustCompile(`^[A-Z0-9_]{1,32}$`).MatchString(RuntimeVolumeLabel) {
		t.Errorf("RuntimeVolumeLabel %q is not an ISO 9660 volume identifier", RuntimeVolumeLabel)
	}
}

func TestGuestConfigValidate(t *testing.T) {
	tests := map[string]struct {
		cfg  GuestConfig
		want string
	}{
		"ok":          {GuestConfig{DotID: "ns/a", Token: strings.Repeat("x", 32)}, ""},
		"no dot":      {GuestConfig{Token: strings.Repeat("x", 32)}, "no dotId"},
		"short token": {GuestConfig{DotID: "ns/a", Token: "secret-secret"}, "shorter"},
		"space":       {GuestConfig{DotID: "ns/a", Token: strings.Repeat("x", 20) + " y"}, "printable"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("Validate() = %v, want %q", err, tc.want)
			}
			if err != nil && tc.cfg.Token != "" && strings.Contains(err.Error(), tc.cfg.Token) {
				t.Fatalf("error quotes the token: %v", err)
			}
		})
	}
}

func TestImageManifestValidate(t *testing.T) {
	sum := strings.Repeat("a", 64)
	good := ImageManifest{Kind: ImageKindGolden, Version: "20261130-abc", File: "golden-20261130-abc.qcow2", SHA256: sum,
		Boot: &DirectBoot{Kernel: "golden-20261130-abc.vmlinuz", KernelSHA256: sum, Initrd: "golden-20261130-abc.initrd", InitrdSHA256: sum, Append: "console=ttyS0 quiet"}}
	tests := map[string]struct {
		edit func(m *ImageManifest)
		want string
	}{
		"ok":              {func(m *ImageManifest) {}, ""},
		"kind":            {func(m *ImageManifest) { m.Kind = "other" }, "kind"},
		"no version":      {func(m *ImageManifest) { m.Version = "" }, "version"},
		"path in file":    {func(m *ImageManifest) { m.File = "../x.qcow2" }, "plain file name"},
		"bad sum":         {func(m *ImageManifest) { m.SHA256 = "ABC" }, "sha256"},
		"runtime boots":   {func(m *ImageManifest) { m.Kind = ImageKindRuntime }, "boot section"},
		"kernel path":     {func(m *ImageManifest) { m.Boot.Kernel = "/boot/vmlinuz" }, "boot.kernel"},
		"comma in append": {func(m *ImageManifest) { m.Boot.Append = "a=b,c" }, "commas"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			m := good
			b := *good.Boot
			m.Boot = &b
			tc.edit(&m)
			err := m.Validate()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("Validate() = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestEngineEnv(t *testing.T) {
	tests := map[string]struct {
		reason  string
		env     EngineEnv
		wantErr string
		want    []string
	}{
		"empty":    {"nothing set leaves the engine its defaults", EngineEnv{}, "", nil},
		"stand-in": {"a stand-in on the host's loopback, as a guest reaches it", EngineEnv{OpenRouterURL: "http://10.0.2.2:8999/api/v1"}, "", []string{EnvOpenRouterURL + "=http://10.0.2.2:8999/api/v1"}},
		"newline":  {"a newline would add a variable", EngineEnv{OpenRouterURL: "http://a/\nX=1"}, "printable ASCII", nil},
		"scheme":   {"only http and https reach a model", EngineEnv{OpenRouterURL: "file:///etc/passwd"}, "not an http or https URL", nil},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := tc.env.Validate()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("%s: Validate() = %v, want %q", tc.reason, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("%s: Validate() = %v", tc.reason, err)
			}
			got, err := ParseEngineEnv(tc.env.Encode())
			if err != nil {
				t.Fatalf("%s: ParseEngineEnv(Encode()) = %v", tc.reason, err)
			}
			if strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Errorf("%s: round trip = %q, want %q", tc.reason, got, tc.want)
			}
		})
	}
	if _, err := ParseEngineEnv([]byte("no equals sign\n")); err == nil {
		t.Error("ParseEngineEnv of a line without NAME=: want an error")
	}
}
