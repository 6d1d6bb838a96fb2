// Package testimage builds the test image (DESIGN.md 5): a Debian cloud
// kernel from Debian's own package, an initramfs holding busybox (from
// busybox-static), our static dot-agentd, the three users and an init that
// reads the NoCloud seed, brings up the network and starts dot-agentd, and a
// small qcow2 disk the Dot's overlay sits on. It writes the image, with the
// runtime ISO (package runtimeiso), into an output folder (see
// guest/image/artifact), from which hostagent/images registers both in a home.
//
// Everything comes from Debian packages fetched with `apt-get download` (no
// install) and from this repository. Downloads are cached under a work
// directory (the Makefile's _output/test-image), and an image whose inputs
// are unchanged since it was registered is not built again.
package testimage

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/invisible-dots/invisible-dots/guest/image/artifact"
	"github.com/invisible-dots/invisible-dots/guest/image/cpio"
	"github.com/invisible-dots/invisible-dots/guest/image/runtimeiso"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/home"
)

//go:embed rootfs
var rootfs embed.FS

// Debian packages the image is made of.
const (
	// KernelMetaPackage depends on the current cloud kernel's package.
	KernelMetaPackage = "linux-image-cloud-amd64"
	BusyboxPackage    = "busybox-static"
)

// HomeLabel is the ext2 label of the golden disk, which the init mounts on
// /home, so a Dot's files live on its own overlay and survive a restart.
const HomeLabel = "dothome"

// HomeDiskBytes is the golden disk's size, below the smallest disk a Dot
// may ask for (protocol.Bounds.DiskGiB), so every overlay holds the whole
// file system. A larger overlay leaves the rest unused: the test image has no
// tool to grow the file system. HomeInodes bounds its inode tables, which
// mke2fs writes out, to a few megabytes.
const (
	HomeDiskBytes = 16 << 30
	HomeInodes    = 131072
)

// KernelAppend is the kernel command line: the console on the serial port
// QEMU writes to serial.log.
const KernelAppend = "console=ttyS0 quiet"

// Modules are the kernel modules the initramfs loads, in this order (DESIGN.md
// 5): Debian 12's cloud kernel builds virtio, the network, the disks, isofs
// and the RNG as modules. Build checks each one's depends= against the ones
// before it.
var Modules = []string{
	"kernel/drivers/virtio/virtio_ring",
	"kernel/drivers/virtio/virtio",
	"kernel/drivers/virtio/virtio_pci_modern_dev",
	"kernel/drivers/virtio/virtio_pci_legacy_dev",
	"kernel/drivers/virtio/virtio_pci",
	"kernel/net/core/failover",
	"kernel/drivers/net/net_failover",
	"kernel/drivers/net/virtio_net",
	"kernel/drivers/block/virtio_blk",
	"kernel/drivers/cdrom/cdrom",
	"kernel/fs/isofs/isofs",
	"kernel/drivers/char/hw_random/virtio-rng",
}

// Users of the image (ref 4.1). dot is in audio, video and systemd-journal;
// dotengine is in group dot.
const (
	uidDot, uidAgentd, uidEngine = 1000, 998, 999
	passwd                       = `root:x:0:0:root:/root:/bin/sh
dotagentd:x:998:998:dot-agentd:/nonexistent:/sbin/nologin
dotengine:x:999:999:the Dot's engine:/home/dotengine:/sbin/nologin
dot:x:1000:1000:Dot:/home/dot:/bin/bash
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
`
	group = `root:x:0:
tty:x:5:
audio:x:29:dot
video:x:44:dot
systemd-journal:x:101:dot
dotagentd:x:998:
dotengine:x:999:
dot:x:1000:dotengine
nogroup:x:65534:
`
)

// Output names in the folder Build writes to. The runtime ISO's are
// runtimeiso.ISOFile and runtimeiso.ManifestFile.
const (
	DiskFile     = "golden.qcow2"
	KernelFile   = "golden.vmlinuz"
	InitrdFile   = "golden.initrd"
	ManifestFile = "golden.json"
)

// Options says where to build and what is built already.
type Options struct {
	// Out is the folder the images are written to, each beside its manifest.
	Out string
	// Repo is this repository's root (holding go.mod).
	Repo string
	// Work caches downloads and build steps between runs.
	Work string
	// Log receives one line per step; nil discards.
	Log func(format string, args ...any)
	// Registered returns an image of a kind (protocol.ImageKindGolden or
	// protocol.ImageKindRuntime) registered already, intact, and built from
	// the inputs digest names (its version ends in "-"+digest). Such an image
	// is not built again. Nil finds none.
	Registered func(kind, digest string) (protocol.ImageManifest, bool)
}

// Result says what was built.
type Result struct {
	Golden, Runtime protocol.ImageManifest
	// GoldenManifest and RuntimeManifest are the manifests written in
	// Options.Out; empty for an image Options.Registered returned, which was
	// not built again.
	GoldenManifest, RuntimeManifest string
}

// Build builds the test image and the runtime ISO into o.Out, each unless it
// is registered already.
func Build(ctx context.Context, o Options) (Result, error) {
	if o.Log == nil {
		o.Log = func(string, ...any) {}
	}
	if o.Registered == nil {
		o.Registered = func(string, string) (protocol.ImageManifest, bool) { return protocol.ImageManifest{}, false }
	}
	b := &builder{o: o, bin: filepath.Join(o.Work, "bin"), debs: filepath.Join(o.Work, "debs"), x: filepath.Join(o.Work, "x")}
	for _, d := range []string{o.Out, b.bin, b.debs, b.x} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return Result{}, fmt.Errorf("make the work directory %s: %w", d, err)
		}
	}
	agentd, err := GoBuild(ctx, o.Repo, "./guest/agentd/cmd/dot-agentd", filepath.Join(b.bin, "dot-agentd"))
	if err != nil {
		return Result{}, err
	}
	launch, err := GoBuild(ctx, o.Repo, "./guest/image/cmd/dots-launch", filepath.Join(b.bin, "dots-launch"))
	if err != nil {
		return Result{}, err
	}
	var engine string
	if _, err := os.Stat(filepath.Join(o.Repo, "guest/engine/cmd/dot-engine")); err == nil {
		if engine, err = GoBuild(ctx, o.Repo, "./guest/engine/cmd/dot-engine", filepath.Join(b.bin, "dot-engine")); err != nil {
			return Result{}, err
		}
	}
	var res Result
	files, err := runtimeiso.Contents(agentd, engine)
	if err != nil {
		return Result{}, err
	}
	if m, ok := o.Registered(protocol.ImageKindRuntime, runtimeiso.Sum(files)); ok {
		o.Log("runtime ISO %s already registered", m.Version)
		res.Runtime = m
	} else {
		if res.RuntimeManifest, res.Runtime, err = runtimeiso.Build(o.Out, files, time.Now()); err != nil {
			return Result{}, err
		}
		o.Log("runtime ISO %s built", res.Runtime.Version)
	}
	if res.Golden, res.GoldenManifest, err = b.golden(ctx, agentd, launch); err != nil {
		return Result{}, err
	}
	return res, nil
}

type builder struct {
	o            Options
	bin, debs, x string
}

// GoBuild builds a static binary (CGO off, as the guest has no libc to
// offer) and returns its path.
func GoBuild(ctx context.Context, repo, pkg, out string) (string, error) {
	goBin := "go"
	if gr := os.Getenv("GOROOT"); gr != "" {
		if _, err := os.Stat(filepath.Join(gr, "bin", "go")); err == nil {
			goBin = filepath.Join(gr, "bin", "go")
		}
	}
	cmd := exec.CommandContext(ctx, goBin, "build", "-trimpath", "-ldflags=-s -w", "-o", out, pkg)
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build %s: %w\n%s", pkg, err, b)
	}
	return out, nil
}

// aptDownload fetches a package's .deb into dir with `apt-get download`
// unless a .deb of it is there already, and returns its path.
func aptDownload(ctx context.Context, dir, pkg string) (string, error) {
	if m, _ := filepath.Glob(filepath.Join(dir, pkg+"_*.deb")); len(m) > 0 {
		sort.Strings(m)
		return m[len(m)-1], nil
	}
	cmd := exec.CommandContext(ctx, "apt-get", "download", pkg)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("apt-get download %s (run apt-get update first; the build needs Debian's package mirror): %w\n%s", pkg, err, out)
	}
	m, _ := filepath.Glob(filepath.Join(dir, pkg+"_*.deb"))
	if len(m) == 0 {
		return "", fmt.Errorf("apt-get download %s left no %s_*.deb in %s", pkg, pkg, dir)
	}
	sort.Strings(m)
	return m[len(m)-1], nil
}

// kernelPackage asks apt which versioned package the cloud kernel's
// metapackage depends on (linux-image-6.1.0-57-cloud-amd64).
func kernelPackage(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "apt-cache", "depends", KernelMetaPackage).Output()
	if err != nil {
		return "", fmt.Errorf("apt-cache depends %s (is apt's package list there? apt-get update): %w", KernelMetaPackage, err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if dep, ok := strings.CutPrefix(strings.TrimSpace(line), "Depends: "); ok && strings.HasPrefix(dep, "linux-image-") {
			return dep, nil
		}
	}
	return "", fmt.Errorf("apt-cache depends %s names no linux-image-* package", KernelMetaPackage)
}

// extract unpacks a .deb once into x/<name of the deb>.
func (b *builder) extract(ctx context.Context, deb string) (string, error) {
	dir := filepath.Join(b.x, strings.TrimSuffix(filepath.Base(deb), ".deb"))
	if _, err := os.Stat(filepath.Join(dir, ".done")); err == nil {
		return dir, nil
	}
	_ = os.RemoveAll(dir)
	if out, err := exec.CommandContext(ctx, "dpkg-deb", "-x", deb, dir).CombinedOutput(); err != nil {
		return "", fmt.Errorf("dpkg-deb -x %s: %w\n%s", deb, err, out)
	}
	return dir, os.WriteFile(filepath.Join(dir, ".done"), nil, 0o644)
}

// builderVersion changes when the image's layout changes without any input
// changing, so the digest moves.
const builderVersion = "testimage/1"

// golden builds the test image into Out and returns its manifest and the
// manifest's path, or the registered image of the same inputs and no path.
func (b *builder) golden(ctx context.Context, agentd, launch string) (protocol.ImageManifest, string, error) {
	kpkg, err := kernelPackage(ctx)
	if err != nil {
		return protocol.ImageManifest{}, "", err
	}
	kdeb, err := aptDownload(ctx, b.debs, kpkg)
	if err != nil {
		return protocol.ImageManifest{}, "", err
	}
	bdeb, err := aptDownload(ctx, b.debs, BusyboxPackage)
	if err != nil {
		return protocol.ImageManifest{}, "", err
	}
	inputs := map[string]string{}
	digest := sha256.New()
	fmt.Fprintln(digest, builderVersion, KernelAppend, HomeDiskBytes, HomeInodes)
	for _, in := range []struct{ name, path string }{{filepath.Base(kdeb), kdeb}, {filepath.Base(bdeb), bdeb}, {"dot-agentd", agentd}, {"dots-launch", launch}} {
		sum, _, err := artifact.FileSHA256(in.path)
		if err != nil {
			return protocol.ImageManifest{}, "", err
		}
		inputs[in.name] = sum
		fmt.Fprintln(digest, in.name, sum)
	}
	if err := artifact.HashFiles(digest, rootfs, "rootfs"); err != nil {
		return protocol.ImageManifest{}, "", err
	}
	fmt.Fprintln(digest, strings.Join(Modules, ","))
	sum := hex.EncodeToString(digest.Sum(nil))[:16]
	if m, ok := b.o.Registered(protocol.ImageKindGolden, sum); ok {
		b.o.Log("test image %s already registered", m.Version)
		return m, "", nil
	}
	kdir, err := b.extract(ctx, kdeb)
	if err != nil {
		return protocol.ImageManifest{}, "", err
	}
	bdir, err := b.extract(ctx, bdeb)
	if err != nil {
		return protocol.ImageManifest{}, "", err
	}
	version := time.Now().UTC().Format("20060102T150405Z") + "-" + sum
	// Builds may share Work and start in the same second (make test-image
	// and a test's build): each has a scratch folder of its own.
	work, err := os.MkdirTemp(b.o.Work, "golden-"+version+"-")
	if err != nil {
		return protocol.ImageManifest{}, "", fmt.Errorf("make a scratch folder in %s: %w", b.o.Work, err)
	}
	defer os.RemoveAll(work)

	kernels, _ := filepath.Glob(filepath.Join(kdir, "boot", "vmlinuz-*"))
	if len(kernels) != 1 {
		return protocol.ImageManifest{}, "", fmt.Errorf("%s holds %d kernels, want one", kdeb, len(kernels))
	}
	kver := strings.TrimPrefix(filepath.Base(kernels[0]), "vmlinuz-")
	busybox := filepath.Join(bdir, "bin", "busybox")
	initrd, err := BuildInitramfs(ctx, InitramfsInputs{
		Busybox: busybox, Agentd: agentd, Launch: launch,
		ModulesDir: filepath.Join(kdir, "lib", "modules", kver),
	})
	if err != nil {
		return protocol.ImageManifest{}, "", err
	}
	inputs["kernel"] = kver
	m := protocol.ImageManifest{
		Kind: protocol.ImageKindGolden, Version: version, File: DiskFile,
		Description: fmt.Sprintf("test image: Debian cloud kernel %s, busybox initramfs with dot-agentd", kver),
		Inputs:      inputs,
		Boot:        &protocol.DirectBoot{Kernel: KernelFile, Initrd: InitrdFile, Append: KernelAppend},
	}
	disk, kernel, initrdPath := filepath.Join(b.o.Out, m.File), filepath.Join(b.o.Out, m.Boot.Kernel), filepath.Join(b.o.Out, m.Boot.Initrd)
	if err := makeHomeDisk(ctx, busybox, filepath.Join(work, "disk.raw"), disk); err != nil {
		return protocol.ImageManifest{}, "", err
	}
	if err := artifact.WriteFile(initrdPath, bytes.NewReader(initrd), 0o444); err != nil {
		return protocol.ImageManifest{}, "", err
	}
	if err := artifact.CopyFile(kernels[0], kernel, 0o444); err != nil {
		return protocol.ImageManifest{}, "", err
	}
	if m.SHA256, m.Size, err = artifact.FileSHA256(disk); err != nil {
		return protocol.ImageManifest{}, "", err
	}
	if m.Boot.KernelSHA256, _, err = artifact.FileSHA256(kernel); err != nil {
		return protocol.ImageManifest{}, "", err
	}
	if m.Boot.InitrdSHA256, _, err = artifact.FileSHA256(initrdPath); err != nil {
		return protocol.ImageManifest{}, "", err
	}
	m.Created = time.Now().UTC().Format(time.RFC3339)
	mp := filepath.Join(b.o.Out, ManifestFile)
	if err := artifact.WriteManifest(mp, m); err != nil {
		return protocol.ImageManifest{}, "", err
	}
	b.o.Log("test image %s built (kernel %s)", version, kver)
	return m, mp, nil
}

// makeHomeDisk makes the golden disk: an ext2 file system labelled HomeLabel
// (busybox's mke2fs, no root needed) converted to qcow2.
func makeHomeDisk(ctx context.Context, busybox, raw, out string) error {
	if err := artifact.SparseFile(raw, HomeDiskBytes); err != nil {
		return err
	}
	defer os.Remove(raw)
	if b, err := exec.CommandContext(ctx, busybox, "mke2fs", "-F", "-L", HomeLabel, "-m", "0", "-b", "4096", "-N", fmt.Sprint(HomeInodes), raw).CombinedOutput(); err != nil {
		return fmt.Errorf("busybox mke2fs: %w\n%s", err, b)
	}
	qemuImg, err := qemuImgPath()
	if err != nil {
		return err
	}
	if b, err := exec.CommandContext(ctx, qemuImg, "convert", "-f", "raw", "-O", "qcow2", raw, out).CombinedOutput(); err != nil {
		return fmt.Errorf("qemu-img convert: %w\n%s", err, b)
	}
	return nil
}

// qemuImgPath finds qemu-img as the host agent finds QEMU (ref 3.1):
// INVISIBLE_DOTS_QEMU_DIR, then PATH.
func qemuImgPath() (string, error) {
	if dir := os.Getenv(home.EnvQEMUDir); dir != "" {
		p := filepath.Join(dir, "qemu-img")
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s names %s, which has no qemu-img: %w", home.EnvQEMUDir, dir, err)
		}
		return p, nil
	}
	p, err := exec.LookPath("qemu-img")
	if err != nil {
		return "", fmt.Errorf("qemu-img is not on PATH (apt-get install qemu-utils): %w", err)
	}
	return p, nil
}

// InitramfsInputs are the files the initramfs is made of.
type InitramfsInputs struct {
	Busybox, Agentd, Launch string
	// ModulesDir is lib/modules/<version> of the extracted kernel package.
	ModulesDir string
}

// BuildInitramfs returns the gzip-compressed newc archive.
func BuildInitramfs(ctx context.Context, in InitramfsInputs) ([]byte, error) {
	a := cpio.New()
	for _, d := range []string{"proc", "sys", "dev", "run", "tmp", "mnt", "root", "home", "etc/init.d", "usr/local/bin", "usr/local/sbin", "var/log", "opt"} {
		if err := a.Dir(d, 0o755, 0, 0); err != nil {
			return nil, err
		}
	}
	_ = a.Dir("tmp", 0o1777, 0, 0)
	_ = a.Dir("root", 0o700, 0, 0)
	busybox, err := os.ReadFile(in.Busybox)
	if err != nil {
		return nil, fmt.Errorf("read busybox: %w", err)
	}
	if err := a.File("bin/busybox", 0o755, 0, 0, busybox); err != nil {
		return nil, err
	}
	// Every applet as a link, where busybox itself says it belongs.
	out, err := exec.CommandContext(ctx, in.Busybox, "--list-full").Output()
	if err != nil {
		return nil, fmt.Errorf("busybox --list-full: %w", err)
	}
	for _, applet := range strings.Fields(string(out)) {
		if applet == "bin/busybox" {
			continue
		}
		depth := strings.Count(applet, "/")
		if err := a.Symlink(applet, strings.Repeat("../", depth)+"bin/busybox"); err != nil {
			return nil, err
		}
	}
	if err := a.Symlink("init", "bin/busybox"); err != nil {
		return nil, err
	}
	for _, f := range []struct {
		src, name string
		mode      fs.FileMode
	}{{in.Agentd, "usr/local/bin/dot-agentd", 0o755}, {in.Launch, "usr/local/sbin/dots-launch", 0o700}} {
		data, err := os.ReadFile(f.src)
		if err != nil {
			return nil, err
		}
		if err := a.File(f.name, f.mode, 0, 0, data); err != nil {
			return nil, err
		}
	}
	var order bytes.Buffer
	for _, m := range Modules {
		ko := filepath.Join(in.ModulesDir, m+".ko")
		data, err := os.ReadFile(ko)
		if err != nil {
			return nil, fmt.Errorf("kernel module %s: %w", m, err)
		}
		if err := checkDepends(filepath.Base(m), data, &order); err != nil {
			return nil, err
		}
		name := filepath.Base(m)
		if err := a.File("lib/modules/"+name+".ko", 0o644, 0, 0, data); err != nil {
			return nil, err
		}
		fmt.Fprintln(&order, name)
	}
	subst := strings.NewReplacer(
		"@SEED_LABEL@", protocol.SeedVolumeLabel,
		"@SEED_CONFIG@", protocol.SeedGuestConfigFile,
		"@GUEST_CONFIG@", protocol.GuestConfigPath,
		"@SEED_ENGINE_ENV@", protocol.SeedEngineEnvFile,
		"@ENGINE_ENV@", protocol.EngineEnvPath,
		"@RUNTIME_LABEL@", protocol.RuntimeVolumeLabel,
		"@RUNTIME_MOUNT@", protocol.RuntimeMountPoint,
		"@HOME_LABEL@", HomeLabel,
		"@AGENTD_DIR@", protocol.AgentdSocketDir,
		"@AGENT_DIR@", protocol.AgentSocketDir,
		"@ENGINE@", protocol.RuntimeEnginePath,
		"@RUNTIME_AGENTD@", protocol.RuntimeAgentdPath,
	)
	files := []struct {
		src, name string
		mode      fs.FileMode
	}{
		{"inittab", "etc/inittab", 0o644},
		{"rcS", "etc/init.d/rcS", 0o755},
		{"rcK", "etc/init.d/rcK", 0o755},
		{"run-dot-agentd", "usr/local/sbin/run-dot-agentd", 0o755},
		{"power-service", "usr/local/sbin/power-service", 0o755},
		{"run-dot-engine", "usr/local/sbin/run-dot-engine", 0o755},
		{"sudo", "usr/bin/sudo", 0o755},
		{"bash", "bin/bash", 0o755},
	}
	for _, f := range files {
		data, err := rootfs.ReadFile("rootfs/" + f.src)
		if err != nil {
			return nil, err
		}
		if err := a.File(f.name, f.mode, 0, 0, []byte(subst.Replace(string(data)))); err != nil {
			return nil, err
		}
	}
	for _, f := range []struct {
		name string
		mode fs.FileMode
		data string
	}{
		{"etc/passwd", 0o644, passwd},
		{"etc/group", 0o644, group},
		{"etc/modules.order", 0o644, order.String()},
		{"etc/hostname", 0o644, "dot\n"},
		{"etc/hosts", 0o644, "127.0.0.1 localhost\n"},
		{"etc/os-release", 0o644, "NAME=\"invisible-dots test image\"\nID=invisible-dots-test\n"},
	} {
		if err := a.File(f.name, f.mode, 0, 0, []byte(f.data)); err != nil {
			return nil, err
		}
	}
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	if _, err := a.WriteTo(zw); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// checkDepends fails when a module depends on one not loaded before it.
func checkDepends(name string, ko []byte, loaded *bytes.Buffer) error {
	i := bytes.Index(ko, []byte("\x00depends="))
	if i < 0 {
		return nil
	}
	rest := ko[i+len("\x00depends="):]
	if j := bytes.IndexByte(rest, 0); j >= 0 {
		rest = rest[:j]
	}
	have := map[string]bool{}
	for _, l := range strings.Fields(loaded.String()) {
		have[strings.ReplaceAll(l, "-", "_")] = true
	}
	for _, dep := range strings.Split(string(rest), ",") {
		if dep != "" && !have[strings.ReplaceAll(dep, "-", "_")] {
			return fmt.Errorf("kernel module %s depends on %s, which the test image does not load before it: fix testimage.Modules", name, dep)
		}
	}
	return nil
}

var errNoRepo = errors.New("no go.mod found above the working directory: pass --repo")

// FindRepo walks up from dir to the directory holding go.mod.
func FindRepo(dir string) (string, error) {
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errNoRepo
		}
		dir = parent
	}
}
