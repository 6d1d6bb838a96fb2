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
	for _, p := range []string{SeedMetaDataFile, SeedUserDataFile, SeedGuestConfigFile, RuntimeAgentdFile, RuntimeEngineFile, RuntimeManifestFile, RuntimeUnitsDir} {
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
