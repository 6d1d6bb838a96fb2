// Package home is the host's home directory, INVISIBLE_DOTS_HOME (ref 3.2 plus
// DESIGN.md 2's additions): the one place that names the files under it, and
// the boot stamp every record naming a process carries. Nothing else in the
// repository spells these names; a file that moves moves here. It imports only
// the standard library, so every other package may import it.
//
// A VM is identified on the host by its namespace and name together (DESIGN.md
// 5): two namespaces may each hold a Dot called "helper", and they must never
// share a directory, a log file or a QEMU name.
package home

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"unicode/utf8"
)

// Environment variables that move the home and the QEMU installation.
const (
	// EnvHome overrides the home directory (default ~/.invisible-dots).
	EnvHome = "INVISIBLE_DOTS_HOME"
	// EnvQEMUDir names the one directory QEMU and qemu-img are taken from
	// (ref 3.1); when set, PATH is not searched.
	EnvQEMUDir = "INVISIBLE_DOTS_QEMU_DIR"
	// DefaultHomeDir is the home's name under the user's home directory.
	DefaultHomeDir = ".invisible-dots"
)

// Names directly under the home.
const (
	ConfigDir      = "config"
	HostConfigFile = "host.yaml"
	APITokenFile   = "api.token"
	MasterKeyFile  = "master.key"
	DBDir          = "db"
	ServerLockFile = "server.lock"
	PKIDir         = "pki"
	KubeconfigFile = "kubeconfig"
	RunDir         = "run"
	WebAddressFile = "web.json"
	ImagesDir      = "images"
	VMsDir         = "vms"
	LogsDir        = "logs"
)

// Names under images/.
const (
	CacheDir         = ".cache"
	GoldenBuildLock  = ".golden-build.lock"
	RuntimeBuildLock = ".runtime-build.lock"
	goldenPrefix     = "golden-"
	runtimePrefix    = "runtime-"
	goldenDiskExt    = ".qcow2"
	goldenKernelExt  = ".vmlinuz"
	goldenInitrdExt  = ".initrd"
	runtimeISOExt    = ".iso"
	manifestExt      = ".json"
	goldenWorkPrefix = ".golden-"
	goldenWorkSuffix = ".work"
	TakeoverSuffix   = ".takeover"
)

// Names inside one VM's directory, vms/<namespace>/<name>/ (Lima's filenames
// habit: the directory's contents are listed once).
const (
	DiskFile     = "disk.qcow2"
	SeedFile     = "seed.iso"
	QEMUJSONFile = "qemu.json"
	// StartPendingFile is the record of a start written before QEMU is
	// spawned ("create pending"): a start an agent died in is found again.
	StartPendingFile = "qemu.pending.json"
	SerialLog        = "serial.log"
)

// Layout is the root of one host's files and the names under it.
type Layout struct {
	// Root is an absolute, cleaned path.
	Root string
}

// New returns the home rooted at dir, made absolute.
func New(dir string) (Layout, error) {
	if dir == "" {
		return Layout{}, errors.New("home directory is empty: set " + EnvHome + " or HOME")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return Layout{}, fmt.Errorf("resolve home directory %q: %w", dir, err)
	}
	return Layout{Root: abs}, nil
}

// FromEnv returns the home named by INVISIBLE_DOTS_HOME, or ~/.invisible-dots.
// It does not check the path rule: callers that hand paths to QEMU call
// QEMUPathProblem (doctor reports it as a row, the driver refuses to start).
func FromEnv() (Layout, error) {
	if dir := os.Getenv(EnvHome); dir != "" {
		return New(dir)
	}
	userHome, err := os.UserHomeDir()
	if err != nil {
		return Layout{}, fmt.Errorf("find the user's home directory (set %s): %w", EnvHome, err)
	}
	return New(filepath.Join(userHome, DefaultHomeDir))
}

// QEMUPathProblem says why QEMU cannot be given path, or returns nil. A comma
// cannot be carried in every QEMU option (a comma inside an option value must
// be doubled, and not every flag parses that), and a non-ASCII character is
// refused on every host so a home that works on one host works on all (ref
// 3.2). Control characters are refused too: they break QEMU's option parser
// and log lines.
func QEMUPathProblem(path string) error {
	for i, r := range path {
		switch {
		case r == ',':
			return fmt.Errorf("path %q holds a comma at byte %d, which QEMU options cannot carry: move %s to a path without one", path, i, EnvHome)
		case r == utf8.RuneError:
			return fmt.Errorf("path %q is not valid UTF-8 at byte %d: move %s to a plain ASCII path", path, i, EnvHome)
		case r > 0x7e:
			return fmt.Errorf("path %q holds the non-ASCII character %q, which QEMU cannot open on every host: move %s to a plain ASCII path", path, r, EnvHome)
		case r < 0x20:
			return fmt.Errorf("path %q holds a control character at byte %d: move %s to a plain ASCII path", path, i, EnvHome)
		}
	}
	return nil
}

// Config is config/, private to the server's user.
func (h Layout) Config() string { return filepath.Join(h.Root, ConfigDir) }

// HostConfig is config/host.yaml: accelerator, CPU model (hostconfig).
func (h Layout) HostConfig() string { return filepath.Join(h.Root, ConfigDir, HostConfigFile) }

// APIToken is config/api.token: the API's bearer token (first line).
func (h Layout) APIToken() string { return filepath.Join(h.Root, ConfigDir, APITokenFile) }

// MasterKey is config/master.key: 32 random bytes, the secrets' encryption key.
func (h Layout) MasterKey() string { return filepath.Join(h.Root, ConfigDir, MasterKeyFile) }

// DB is db/, the managed PostgreSQL's data directory.
func (h Layout) DB() string { return filepath.Join(h.Root, DBDir) }

// ServerLock is server.lock, the one-server-per-home lock.
func (h Layout) ServerLock() string { return filepath.Join(h.Root, ServerLockFile) }

// Takeover is the file created exclusively by the one process allowed to take
// over a stale lock (ref 3.2).
func Takeover(lockPath string) string { return lockPath + TakeoverSuffix }

// PKI is pki/: the CA and the serving certificate.
func (h Layout) PKI() string { return filepath.Join(h.Root, PKIDir) }

// Kubeconfig is the admin kubeconfig (0600).
func (h Layout) Kubeconfig() string { return filepath.Join(h.Root, KubeconfigFile) }

// Run is run/, the unix sockets (PostgreSQL, kine).
func (h Layout) Run() string { return filepath.Join(h.Root, RunDir) }

// WebAddress is run/web.json: where the running server's web client is
// and whether people sign in there (webui.Published), for 'user add' to say.
func (h Layout) WebAddress() string { return filepath.Join(h.Root, RunDir, WebAddressFile) }

// Images is images/.
func (h Layout) Images() string { return filepath.Join(h.Root, ImagesDir) }

// ImagesCache is images/.cache/, verified downloads.
func (h Layout) ImagesCache() string { return filepath.Join(h.Root, ImagesDir, CacheDir) }

// GoldenBuildLock and RuntimeBuildLock are the two build locks.
func (h Layout) GoldenBuildLock() string  { return filepath.Join(h.Root, ImagesDir, GoldenBuildLock) }
func (h Layout) RuntimeBuildLock() string { return filepath.Join(h.Root, ImagesDir, RuntimeBuildLock) }

// Golden is images/golden-<version>.qcow2, immutable once a VM uses it.
func (h Layout) Golden(version string) string {
	return filepath.Join(h.Root, ImagesDir, goldenPrefix+version+goldenDiskExt)
}

// GoldenManifest is images/golden-<version>.json.
func (h Layout) GoldenManifest(version string) string {
	return filepath.Join(h.Root, ImagesDir, goldenPrefix+version+manifestExt)
}

// GoldenKernel and GoldenInitrd are images/golden-<version>.vmlinuz and
// .initrd, the kernel and initramfs a golden image without a boot loader is
// booted with (its manifest's boot section names them).
func (h Layout) GoldenKernel(version string) string {
	return filepath.Join(h.Root, ImagesDir, goldenPrefix+version+goldenKernelExt)
}
func (h Layout) GoldenInitrd(version string) string {
	return filepath.Join(h.Root, ImagesDir, goldenPrefix+version+goldenInitrdExt)
}

// GoldenWork is images/.golden-<version>.work/, a golden build in progress.
func (h Layout) GoldenWork(version string) string {
	return filepath.Join(h.Root, ImagesDir, goldenWorkPrefix+version+goldenWorkSuffix)
}

// Runtime is images/runtime-<version>.iso.
func (h Layout) Runtime(version string) string {
	return filepath.Join(h.Root, ImagesDir, runtimePrefix+version+runtimeISOExt)
}

// RuntimeManifest is images/runtime-<version>.json.
func (h Layout) RuntimeManifest(version string) string {
	return filepath.Join(h.Root, ImagesDir, runtimePrefix+version+manifestExt)
}

// ImageKind tells golden images from runtime ISOs.
type ImageKind string

const (
	Golden  ImageKind = "golden"
	Runtime ImageKind = "runtime"
)

// OlderImage says whether image version a was built before b. A version
// begins with its build time ("20261204T225434Z-<digest>"), so the order of
// the strings is the order of the builds: the one rule of which image is
// newer, for the registry, the driver and the reconcilers.
func OlderImage(a, b string) bool { return a < b }

// ParseImageFile reads the kind and version out of a file name under images/
// ("golden-V.qcow2", "runtime-V.iso"; manifests are not images).
func ParseImageFile(base string) (kind ImageKind, version string, ok bool) {
	switch {
	case strings.HasPrefix(base, goldenPrefix) && strings.HasSuffix(base, goldenDiskExt):
		kind, version = Golden, strings.TrimSuffix(strings.TrimPrefix(base, goldenPrefix), goldenDiskExt)
	case strings.HasPrefix(base, runtimePrefix) && strings.HasSuffix(base, runtimeISOExt):
		kind, version = Runtime, strings.TrimSuffix(strings.TrimPrefix(base, runtimePrefix), runtimeISOExt)
	default:
		return "", "", false
	}
	if version == "" || ValidVersion(version) != nil {
		return "", "", false
	}
	return kind, version, true
}

// versionRE: versions are "<date>-<digest>" so the newest sorts last; any
// plain-ASCII token without separators or path characters is accepted.
var versionRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// ValidVersion refuses an image version that could leave images/ or confuse
// QEMU's option parser.
func ValidVersion(v string) error {
	if !versionRE.MatchString(v) || strings.Contains(v, "..") {
		return fmt.Errorf("image version %q is not a plain token of letters, digits, '.', '_' and '-'", v)
	}
	return nil
}

// ImageFile is the path of an image of a kind and version.
func (h Layout) ImageFile(kind ImageKind, version string) string {
	if kind == Golden {
		return h.Golden(version)
	}
	return h.Runtime(version)
}

// ImageManifest is the manifest path of an image of a kind and version.
func (h Layout) ImageManifest(kind ImageKind, version string) string {
	if kind == Golden {
		return h.GoldenManifest(version)
	}
	return h.RuntimeManifest(version)
}

// VMs is vms/.
func (h Layout) VMs() string { return filepath.Join(h.Root, VMsDir) }

// Logs is logs/.
func (h Layout) Logs() string { return filepath.Join(h.Root, LogsDir) }

// VMID is a VM's identity on the host: the Computer's namespace and name.
type VMID struct {
	Namespace string
	Name      string
}

// String is "<namespace>.<name>": a dot cannot occur in either part (both are
// DNS labels), so the joint form is unambiguous, unlike "a-b" + "c" vs
// "a" + "b-c" with a hyphen.
func (id VMID) String() string { return id.Namespace + "." + id.Name }

// labelRE is a DNS label (RFC 1123), what Kubernetes allows for a namespace;
// a Dot's name ([a-z0-9-], 1..40) is a subset.
var labelRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// Validate refuses a namespace or a name that is not a DNS label, so neither
// can climb out of vms/ or carry a character QEMU would misread.
func (id VMID) Validate() error {
	if !labelRE.MatchString(id.Namespace) {
		return fmt.Errorf("namespace %q is not a DNS label ([a-z0-9-], 1 to 63 characters, alphanumeric at both ends)", id.Namespace)
	}
	if !labelRE.MatchString(id.Name) {
		return fmt.Errorf("computer name %q is not a DNS label ([a-z0-9-], 1 to 63 characters, alphanumeric at both ends)", id.Name)
	}
	return nil
}

// VM holds the paths of one VM's files.
type VM struct {
	ID VMID
	// Dir is vms/<namespace>/<name>/.
	Dir  string
	logs string
}

// VM returns the paths of a VM. It does not validate id: call id.Validate
// before creating anything from it.
func (h Layout) VM(id VMID) VM {
	return VM{ID: id, Dir: filepath.Join(h.Root, VMsDir, id.Namespace, id.Name), logs: h.Logs()}
}

// Disk is the overlay whose backing file is a golden image.
func (v VM) Disk() string { return filepath.Join(v.Dir, DiskFile) }

// Seed is the NoCloud seed ISO, rewritten at every start.
func (v VM) Seed() string { return filepath.Join(v.Dir, SeedFile) }

// QEMUJSON is the record of the running QEMU: pid, guest port, host uptime,
// boot id; written atomically right after the spawn.
func (v VM) QEMUJSON() string { return filepath.Join(v.Dir, QEMUJSONFile) }

// StartPending is the record of a start, written before QEMU is spawned
// and removed once qemu.json is written.
func (v VM) StartPending() string { return filepath.Join(v.Dir, StartPendingFile) }

// SerialLog is the guest's serial console, truncated at each start.
func (v VM) SerialLog() string { return filepath.Join(v.Dir, SerialLog) }

// QEMULog is logs/qemu-<namespace>.<name>.log, QEMU's own output.
func (v VM) QEMULog() string { return filepath.Join(v.logs, "qemu-"+v.ID.String()+".log") }

// QEMUName is the value of QEMU's -name: invisible-dot-<namespace>.<name>.
func (v VM) QEMUName() string { return "invisible-dot-" + v.ID.String() }

// Private directories and files are readable by the server's user only.
const (
	PrivateDirMode  os.FileMode = 0o700
	PrivateFileMode os.FileMode = 0o600
)

// Ensure creates the home's directories that every part expects (not db/,
// which PostgreSQL's initdb creates) and brings the private ones back to
// 0700 when they exist with a wider mode (ref 3.2: every start does).
func (h Layout) Ensure() error {
	for _, d := range []string{h.Root, h.Config(), h.PKI(), h.Run(), h.Images(), h.VMs(), h.Logs()} {
		if err := os.MkdirAll(d, PrivateDirMode); err != nil {
			return fmt.Errorf("create %s: %w", d, err)
		}
	}
	for _, d := range []string{h.Root, h.Config(), h.PKI(), h.Run(), h.DB()} {
		if err := os.Chmod(d, PrivateDirMode); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("make %s private: %w", d, err)
		}
	}
	for _, f := range []string{h.MasterKey(), h.APIToken(), h.Kubeconfig()} {
		if err := os.Chmod(f, PrivateFileMode); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("make %s private: %w", f, err)
		}
	}
	return nil
}
