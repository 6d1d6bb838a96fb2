package protocol

import (
	"fmt"
	"net/url"
	"path"
	"regexp"
	"strings"
)

// This file is the contract between what the host writes and what the guest
// reads at boot: the labels of the two ISOs, the names of the files in them,
// the JSON the guest reads its token from, and the manifest of an image under
// $INVISIBLE_DOTS_HOME/images/. Each label and name is defined here once
// (ref 3.3); the host's writer, the image builders and the test image's init
// all take them from here.
//
// Both ISOs are written by guest/image/isofs (github.com/kdomanski/iso9660),
// which records plain ISO 9660 names (no Rock Ridge, no Joliet): lower-case
// letters, digits, '-' and '_', at most one '.', 30 characters. Linux shows
// them as written. Every name below keeps to that, and a test holds them to it.

// SeedVolumeLabel is the NoCloud seed's volume label: cloud-init finds its
// datasource by it, and the test image's init mounts the seed by it.
const SeedVolumeLabel = "cidata"

// Files of the NoCloud seed (vms/<namespace>/<name>/seed.iso).
const (
	// SeedMetaDataFile is NoCloud's meta-data: instance-id
	// (iid-<name>-<hash of seed content>) and local-hostname.
	SeedMetaDataFile = "meta-data"
	// SeedUserDataFile is the #cloud-config a golden image's cloud-init runs:
	// it writes GuestConfigPath and the sudoers rule of ref 4.1.
	SeedUserDataFile = "user-data"
	// SeedGuestConfigFile holds the GuestConfig as JSON, the same bytes the
	// user-data writes to GuestConfigPath. The test image, which has no
	// cloud-init, copies it from here.
	SeedGuestConfigFile = "dot-config.json"
	// SeedEngineEnvFile holds the engine's environment the host decides
	// (EngineEnv.Encode). The guest puts it at EngineEnvPath.
	SeedEngineEnvFile = "engine.env"
	// SeedSudoersFile is the sudoers rule of ref 4.1 (dotagentd may power
	// the guest off), the same rule the user-data writes. The golden image's
	// own seed reader, which does not run cloud-config, installs it from
	// here after visudo has checked it.
	SeedSudoersFile = "sudoers"
)

// EngineEnvPath is where a guest keeps the engine's environment from the
// seed: the engine's unit reads it as its EnvironmentFile, the test image's
// launcher with --env-file. It holds no secret (0644, root's).
const EngineEnvPath = "/etc/invisible-dots/engine.env"

// RuntimeVolumeLabel is the runtime ISO's volume label (ref 3.3): the guest
// mounts it at RuntimeMountPoint, read-only.
const RuntimeVolumeLabel = "DOTS_RUNTIME"

// Files of the runtime ISO (images/runtime-<version>.iso), as paths inside
// it; mounted, each is under RuntimeMountPoint.
const (
	RuntimeBinDir       = "bin"
	RuntimeAgentdFile   = RuntimeBinDir + "/dot-agentd" // the static dot-agentd binary
	RuntimeEngineFile   = RuntimeBinDir + "/dot-engine" // the static engine, when built
	RuntimeManifestFile = "manifest.json"               // RuntimeContents as JSON
	RuntimeUnitsDir     = "units"                       // the systemd units of ref 4.1
	RuntimeSkillsDir    = "engine/skills"               // the built-in skills, one folder each (ref 8.6)
	// RuntimeAgentdPath is dot-agentd in a running guest: what the engine
	// runs as `dot-agentd relay`.
	RuntimeAgentdPath = RuntimeMountPoint + "/" + RuntimeAgentdFile
	RuntimeEnginePath = RuntimeMountPoint + "/" + RuntimeEngineFile
)

// GuestConfig is what the Dot's seed gives the guest (ref 4.2, 9.4): the
// Dot's identity and its token, the one secret in the seed. It is written to
// GuestConfigPath, 0600, owned by dotagentd.
type GuestConfig struct {
	// DotID is how the host names the Dot ("<namespace>/<name>").
	DotID string `json:"dotId"`
	// Token is the bearer token of every request to this guest. Never logged.
	Token string `json:"token"`
	// Hostname is the guest's host name (the same as meta-data's
	// local-hostname); empty keeps the image's.
	Hostname string `json:"hostname,omitempty"`
}

// EngineEnv is the part of the engine's environment the host decides, read
// by the engine once at its start (ref 8.8). It travels in the seed, so a
// change applies from the VM's next start. It holds no secret: the key is
// pushed over the guest channel, never put in an environment (ref 4.3).
type EngineEnv struct {
	// OpenRouterURL is the base URL of OpenRouter's API (host.yaml
	// openrouterURL), EnvOpenRouterURL in the engine's environment; empty
	// leaves the engine's default, DefaultOpenRouterURL.
	OpenRouterURL string
	// ExitEchoURLs are the address-echo services a browser launch asks for
	// its exit's address (host.yaml exitEchoURLs), EnvExitEchoURLs joined
	// with commas; empty leaves the engine's (api.ipify.org and two more).
	ExitEchoURLs []string
}

// DefaultOpenRouterURL is OpenRouter's API, the engine's default.
const DefaultOpenRouterURL = "https://openrouter.ai/api/v1"

// Validate refuses what cannot be one line of an environment file, and a URL
// that is not http or https.
func (e EngineEnv) Validate() error {
	if e.OpenRouterURL != "" {
		if err := ValidateOpenRouterURL(e.OpenRouterURL); err != nil {
			return err
		}
	}
	return ValidateEchoURLs(e.ExitEchoURLs)
}

// ValidateEchoURLs says what is wrong with a list of address-echo services:
// each an absolute http or https URL of printable ASCII without spaces or
// commas (the list is one line, comma-separated).
func ValidateEchoURLs(urls []string) error {
	for _, u := range urls {
		if strings.Contains(u, ",") {
			return fmt.Errorf("exit echo URL %q holds a comma", u)
		}
		if err := validateEnvURL("exit echo URL", u); err != nil {
			return err
		}
	}
	return nil
}

// ValidateOpenRouterURL says what is wrong with a base URL of OpenRouter's
// API: it must be an absolute http or https URL of printable ASCII without
// spaces (one line of an environment file).
func ValidateOpenRouterURL(u string) error { return validateEnvURL("openrouter URL", u) }

// validateEnvURL is the rule of a URL the engine's environment carries: an
// absolute http or https URL of printable ASCII without spaces.
func validateEnvURL(what, u string) error {
	for _, r := range u {
		if r < 0x21 || r > 0x7e {
			return fmt.Errorf("%s %q must be printable ASCII without spaces", what, u)
		}
	}
	parsed, err := url.Parse(u)
	if err != nil || (parsed.Scheme != "http" && parsed.Scheme != "https") || parsed.Host == "" {
		return fmt.Errorf("%s %q is not an http or https URL", what, u)
	}
	return nil
}

// Encode is the environment file: one NAME=VALUE line per set variable, in
// the syntax systemd's EnvironmentFile and ParseEngineEnv read.
func (e EngineEnv) Encode() []byte {
	var b strings.Builder
	b.WriteString("# The engine's environment, from the Dot's seed (written by the host agent).\n")
	if e.OpenRouterURL != "" {
		b.WriteString(EnvOpenRouterURL + "=" + e.OpenRouterURL + "\n")
	}
	if len(e.ExitEchoURLs) > 0 {
		b.WriteString(EnvExitEchoURLs + "=" + strings.Join(e.ExitEchoURLs, ",") + "\n")
	}
	return []byte(b.String())
}

// ParseEngineEnv reads an environment file: NAME=VALUE lines, blank lines
// and lines starting with # skipped, no quoting. It returns NAME=VALUE
// strings, for an exec's environment.
func ParseEngineEnv(data []byte) ([]string, error) {
	var out []string
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, _, ok := strings.Cut(line, "=")
		if !ok || !envNameRe.MatchString(name) {
			return nil, fmt.Errorf("line %d is not NAME=VALUE", i+1)
		}
		out = append(out, line)
	}
	return out, nil
}

// MinTokenLength is the shortest token dot-agentd accepts from its config.
const MinTokenLength = 16

// Validate refuses a config dot-agentd cannot serve with. It never quotes
// the token.
func (c GuestConfig) Validate() error {
	if c.DotID == "" {
		return fmt.Errorf("guest config has no dotId")
	}
	if err := ValidateToken(c.Token); err != nil {
		return fmt.Errorf("guest config %w", err)
	}
	return nil
}

// ValidateToken is the one rule of a guest token's validity, for the guest
// that serves with it and the host that makes, reads and sends it: at least
// MinTokenLength characters of printable ASCII without spaces. It never
// quotes the token.
func ValidateToken(token string) error {
	if len(token) < MinTokenLength {
		return fmt.Errorf("token is shorter than %d characters", MinTokenLength)
	}
	for _, r := range token {
		if r < 0x21 || r > 0x7e {
			return fmt.Errorf("token must be printable ASCII without spaces")
		}
	}
	return nil
}

// RuntimeContents is manifest.json on the runtime ISO: what it carries.
type RuntimeContents struct {
	Version string `json:"version"`
	// Files maps each file's path on the ISO to its SHA-256 (hex).
	Files map[string]string `json:"files"`
}

// Image kinds of ImageManifest.Kind; the same words as the file prefixes of
// internal/home.
const (
	ImageKindGolden  = "golden"
	ImageKindRuntime = "runtime"
)

// ImageManifest is images/<kind>-<version>.json (ref 3.2): what was built,
// from what, and the digest of the result, so doctor can tell an image that
// changed after it was registered.
type ImageManifest struct {
	Kind    string `json:"kind"`
	Version string `json:"version"`
	// File is the image's base name in images/ (in a builder's output
	// folder: beside the manifest, see guest/image/artifact).
	File   string `json:"file"`
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
	// Created is RFC 3339.
	Created string `json:"created"`
	// Description says what the image is ("test image: Debian cloud kernel
	// 6.1.0-57 + busybox initramfs").
	Description string `json:"description,omitempty"`
	// Inputs names each input (a Debian package, our binary) with its
	// version or digest.
	Inputs map[string]string `json:"inputs,omitempty"`
	// Boot, for a golden image only, asks the host to boot the kernel and
	// initramfs named here (QEMU -kernel, -initrd, -append) instead of the
	// disk's own boot loader. Neither the test image nor the golden image
	// has a boot loader: both are booted this way.
	Boot *DirectBoot `json:"boot,omitempty"`
	// Desktop says the image is a full golden image (systemd, the desktop,
	// the browser: `invisible-dots image build`), not the test image; the
	// doctor's golden image row requires one.
	Desktop bool `json:"desktop,omitempty"`
}

// DirectBoot names a kernel and an initramfs beside the image (in images/, or
// in a builder's output folder) and the kernel's command line.
type DirectBoot struct {
	Kernel       string `json:"kernel"`
	KernelSHA256 string `json:"kernelSha256"`
	Initrd       string `json:"initrd"`
	InitrdSHA256 string `json:"initrdSha256"`
	Append       string `json:"append"`
}

var (
	sha256RE   = regexp.MustCompile(`^[0-9a-f]{64}$`)
	baseNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,200}$`)
	// appendRE keeps the kernel command line to what QEMU's -append carries
	// unquoted in an argv: printable ASCII without commas.
	appendRE = regexp.MustCompile(`^[\x20-\x2b\x2d-\x7e]*$`)
)

// Validate refuses a manifest that does not describe one file in images/.
func (m ImageManifest) Validate() error {
	if m.Kind != ImageKindGolden && m.Kind != ImageKindRuntime {
		return fmt.Errorf("image manifest kind %q is neither %q nor %q", m.Kind, ImageKindGolden, ImageKindRuntime)
	}
	if m.Version == "" {
		return fmt.Errorf("image manifest has no version")
	}
	if err := checkBaseName("file", m.File); err != nil {
		return err
	}
	if !sha256RE.MatchString(m.SHA256) {
		return fmt.Errorf("image manifest sha256 %q is not 64 lowercase hex characters", m.SHA256)
	}
	if b := m.Boot; b != nil {
		if m.Kind != ImageKindGolden {
			return fmt.Errorf("image manifest of a %s image has a boot section; only a golden image boots", m.Kind)
		}
		if err := checkBaseName("boot.kernel", b.Kernel); err != nil {
			return err
		}
		if err := checkBaseName("boot.initrd", b.Initrd); err != nil {
			return err
		}
		if !sha256RE.MatchString(b.KernelSHA256) || !sha256RE.MatchString(b.InitrdSHA256) {
			return fmt.Errorf("image manifest boot digests must be 64 lowercase hex characters")
		}
		if !appendRE.MatchString(b.Append) {
			return fmt.Errorf("image manifest boot.append must be printable ASCII without commas")
		}
	}
	return nil
}

func checkBaseName(field, name string) error {
	if !baseNameRE.MatchString(name) || path.Base(name) != name || name == "." || name == ".." {
		return fmt.Errorf("image manifest %s %q is not a plain file name in images/", field, name)
	}
	return nil
}
