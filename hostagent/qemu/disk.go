package qemu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/invisible-dots/invisible-dots/hostagent/driver"
	"github.com/invisible-dots/invisible-dots/hostagent/images"
	"github.com/invisible-dots/invisible-dots/internal/home"
)

// ensureDisk creates the overlay on first use, grows an existing one to a
// larger spec.DiskBytes (ref 9.7: a disk grows, never shrinks; the golden
// image's root file system grows to it at boot, x-systemd.growfs), and
// returns the golden image version it sits on.
func (d *Driver) ensureDisk(ctx context.Context, vm home.VM, spec driver.Spec) (string, error) {
	if _, err := os.Stat(vm.Disk()); err == nil {
		info, err := d.overlayInfo(ctx, vm.Disk())
		if err != nil {
			return "", err
		}
		if spec.DiskBytes > info.size {
			if err := d.growDisk(ctx, vm, info.size, spec.DiskBytes); err != nil {
				return "", err
			}
		}
		return info.golden, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	// The spec's version, else the newest registered, a full golden image
	// first (Latest says how to register one when there is none).
	var img images.Image
	var err error
	if spec.GoldenImage != "" {
		img, err = images.Get(d.home, home.Golden, spec.GoldenImage)
	} else {
		img, err = images.DefaultGolden(d.home)
	}
	if err != nil {
		return "", err
	}
	if err := home.QEMUPathProblem(img.File); err != nil {
		return "", err
	}
	// qemu-img writes the overlay itself, so it is made under a temporary
	// name and renamed into place here rather than written through renameio,
	// which only replaces files this process writes.
	tmp := filepath.Join(vm.Dir, ".disk.qcow2.creating")
	_ = os.Remove(tmp)
	args := []string{"create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", img.File, tmp}
	if spec.DiskBytes > 0 {
		args = append(args, fmt.Sprintf("%d", spec.DiskBytes))
	}
	if out, err := d.runImg(ctx, args...); err != nil {
		_ = os.Remove(tmp)
		// qemu-img says a full disk only in its output ("No space left on
		// device"); its half-made overlay is gone with tmp.
		err = home.MarkDiskFull(err, out)
		return "", d.home.NoteWrite(vm.Disk(), fmt.Errorf("create the overlay on %s: %w: %s", filepath.Base(img.File), err, strings.TrimSpace(out)))
	}
	if err := os.Chmod(tmp, home.PrivateFileMode); err != nil {
		_ = os.Remove(tmp)
		return "", err
	}
	if err := os.Rename(tmp, vm.Disk()); err != nil {
		_ = os.Remove(tmp)
		return "", fmt.Errorf("create the overlay: %w", err)
	}
	d.home.NoteWrite(vm.Disk(), nil)
	return img.Version, nil
}

func (d *Driver) runImg(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, d.bin.Img, args...)
	cmd.Env = allowlistedEnvironment(d.environ())
	cmd.Dir = d.home.Root
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// overlay is what qemu-img says of a VM's overlay.
type overlay struct {
	// golden is the version of the golden image it sits on.
	golden string
	// size is its virtual size in bytes: the disk the guest sees.
	size int64
}

// overlayInfo reads which golden image an existing overlay sits on, and its
// size.
func (d *Driver) overlayInfo(ctx context.Context, disk string) (overlay, error) {
	// -U: a running QEMU holds the image's lock; info only reads.
	out, err := d.runImg(ctx, "info", "-U", "--output=json", disk)
	if err != nil {
		return overlay{}, fmt.Errorf("read the overlay %s: %w: %s", disk, err, strings.TrimSpace(out))
	}
	var info struct {
		Backing     string `json:"backing-filename"`
		VirtualSize int64  `json:"virtual-size"`
	}
	if err := json.Unmarshal([]byte(out), &info); err != nil {
		return overlay{}, fmt.Errorf("read the overlay %s: %w", disk, err)
	}
	kind, version, ok := home.ParseImageFile(filepath.Base(info.Backing))
	if !ok || kind != home.Golden {
		return overlay{}, fmt.Errorf("the overlay %s sits on %q, not on a registered golden image: destroy the VM to make a new disk", disk, info.Backing)
	}
	return overlay{golden: version, size: info.VirtualSize}, nil
}

// growDisk makes a stopped VM's overlay larger (qemu-img resize; a qcow2
// takes no room on the host for the added space until the guest writes it).
// It is never made smaller: the API refuses a smaller disk, and a spec from
// before that rule is left as the disk is.
func (d *Driver) growDisk(ctx context.Context, vm home.VM, from, to int64) error {
	if out, err := d.runImg(ctx, "resize", "-q", vm.Disk(), fmt.Sprintf("%d", to)); err != nil {
		err = home.MarkDiskFull(err, out)
		return d.home.NoteWrite(vm.Disk(), fmt.Errorf("grow the disk %s from %d to %d bytes: %w: %s", vm.Disk(), from, to, err, strings.TrimSpace(out)))
	}
	d.home.NoteWrite(vm.Disk(), nil)
	return nil
}
