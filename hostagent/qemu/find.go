package qemu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"time"

	"github.com/invisible-dots/invisible-dots/hostagent/hostconfig"
	"github.com/invisible-dots/invisible-dots/internal/home"
)

// Program names.
const (
	SystemBinary = "qemu-system-x86_64"
	ImgBinary    = "qemu-img"
)

// Binaries are the two QEMU programs, by absolute path.
type Binaries struct {
	System string
	Img    string
	// Dir is set when INVISIBLE_DOTS_QEMU_DIR chose them.
	Dir string
}

// ErrNotFound: a QEMU program is not installed where it is looked for.
var ErrNotFound = errors.New("not found")

// FindBinaries finds QEMU as ref 3.1 says: in INVISIBLE_DOTS_QEMU_DIR alone
// when it is set (a qemu-img of another installation would run a second
// version on the same disks), otherwise on PATH. getenv is os.Getenv outside
// tests.
func FindBinaries(getenv func(string) string) (Binaries, error) {
	if dir := getenv(home.EnvQEMUDir); dir != "" {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return Binaries{}, fmt.Errorf("resolve %s=%q: %w", home.EnvQEMUDir, dir, err)
		}
		b := Binaries{Dir: abs, System: filepath.Join(abs, SystemBinary), Img: filepath.Join(abs, ImgBinary)}
		for _, p := range []string{b.System, b.Img} {
			if err := executable(p); err != nil {
				return b, fmt.Errorf("%w: %s (%s=%s; install QEMU there or unset it): %v", ErrNotFound, p, home.EnvQEMUDir, dir, err)
			}
		}
		return b, nil
	}
	var b Binaries
	for _, name := range []string{SystemBinary, ImgBinary} {
		p, err := lookPath(getenv("PATH"), name)
		if err != nil {
			return b, fmt.Errorf("%w: %s is not on PATH (install it: sudo apt-get install -y qemu-system-x86 qemu-utils)", ErrNotFound, name)
		}
		if name == SystemBinary {
			b.System = p
		} else {
			b.Img = p
		}
	}
	return b, nil
}

func executable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", p)
	}
	return nil
}

// lookPath searches pathList (not the process's PATH, so tests can pass their
// own) and returns an absolute path.
func lookPath(pathList, name string) (string, error) {
	for _, dir := range filepath.SplitList(pathList) {
		if dir == "" || !filepath.IsAbs(dir) {
			// A relative PATH entry would resolve against whatever the
			// working directory is: never run QEMU from there.
			continue
		}
		p := filepath.Join(dir, name)
		if executable(p) == nil {
			return p, nil
		}
	}
	return "", exec.ErrNotFound
}

var versionRE = regexp.MustCompile(`version (\d+)\.(\d+)(?:\.(\d+))?`)

// ParseVersion reads "QEMU emulator version 7.2.22 (Debian ...)".
func ParseVersion(out string) (hostconfig.Version, error) {
	m := versionRE.FindStringSubmatch(out)
	if m == nil {
		return hostconfig.Version{}, fmt.Errorf("no version in %q", firstLine(out))
	}
	var v hostconfig.Version
	v.Major, _ = strconv.Atoi(m[1])
	v.Minor, _ = strconv.Atoi(m[2])
	if m[3] != "" {
		v.Patch, _ = strconv.Atoi(m[3])
	}
	return v, nil
}

// Version runs a QEMU program's --version.
func Version(ctx context.Context, binary string) (hostconfig.Version, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "--version")
	cmd.Env = allowlistedEnvironment(os.Environ())
	out, err := cmd.Output()
	if err != nil {
		return hostconfig.Version{}, fmt.Errorf("run %s --version: %w", binary, err)
	}
	return ParseVersion(string(out))
}

func firstLine(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			return s[:i]
		}
	}
	return s
}
