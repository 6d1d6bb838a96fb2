// Package golden builds the golden image (ref 3.3, DESIGN.md 5): a Debian 12
// system with systemd, the users and units of ref 4.1, the hardening of ref
// 4.1 and 4.3, a small NoCloud seed reader, Xvfb with a minimal XFCE session,
// Chromium, Node and @playwright/mcp, and fonts. It is built without a
// builder VM: mmdebstrap installs the packages into a directory through the
// host's own apt sources, provision.sh sets the users and units up inside
// it, mke2fs -d makes an ext4 file system of the directory (no loop mount)
// and qemu-img turns that into the qcow2 every Dot's overlay sits on. The
// kernel and initramfs are taken out of the image, so the host boots it
// directly (QEMU -kernel, -initrd) with no boot loader.
//
// Two choices were measured on the build machines (2 shared cores, tcg):
//   - The seed is read by dots-seed (rootfs/usr/local/sbin), not cloud-init.
//     The same image with cloud-init (32 more packages, Python) and the seed's
//     user-data reached dot-agentd's health in 35-40 s from QEMU's start;
//     with dots-seed in 14-29 s (noisy machine; 24 s over 3 runs of
//     BenchmarkStartStopGoldenImage). cloud-init would also bring Debian's
//     default user with a sudo rule, which ref 4.1 does not allow.
//   - The host boots the image's kernel and initramfs directly, with no boot
//     loader: SeaBIOS alone reaches its boot decision in 0.1-0.4 s, and QEMU's
//     -kernel has the kernel running 0.4-2.6 s after start; a boot loader
//     would start after the former and read the same 29 MB through BIOS disk
//     calls, so it cannot be quicker, and installing one would need a
//     partitioned disk and a mount, which this build avoids.
//
// Build writes the image into an output folder (see guest/image/artifact),
// from which hostagent/images registers it in a home, as the test image is.
// Its version is "<date>-<digest of its inputs>"; an image of the same inputs
// registered already is not built again.
package golden

import (
	"bufio"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/invisible-dots/invisible-dots/guest/image/artifact"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

//go:embed rootfs provision.sh npm/package.json npm/package-lock.json
var recipeFS embed.FS

// Output names in the folder Build writes to.
const (
	DiskFile     = "golden.qcow2"
	KernelFile   = "golden.vmlinuz"
	InitrdFile   = "golden.initrd"
	ManifestFile = "golden.json"
)

// builderVersion changes when the way the image is made changes without any
// input changing, so the digest moves.
const builderVersion = "golden/1"

// Options says where to build and what is built already.
type Options struct {
	// Out is the folder the image is written to, beside its manifest.
	Out string
	// Work keeps the package cache and the npm cache between runs; each
	// build's scratch directory is made in it and removed after.
	Work string
	// Log receives one line per step; nil discards.
	Log func(format string, args ...any)
	// Registered returns a golden image registered already, intact, and
	// built from the inputs digest names. Such an image is not built again.
	Registered func(digest string) (protocol.ImageManifest, bool)
	// Sources are apt sources files of the host (deb822 .sources or
	// one-line .list); nil reads /etc/apt/sources.list and
	// /etc/apt/sources.list.d.
	Sources []string
	// Lists is apt's list directory, whose Release files of the suites used
	// are part of the digest; empty is /var/lib/apt/lists.
	Lists string
}

// Result says what was built.
type Result struct {
	Manifest protocol.ImageManifest
	// ManifestPath is the manifest written in Out; empty when the image was
	// registered already and not built again.
	ManifestPath string
}

// Tools are the programs Build runs, with the Debian package of each.
var Tools = []struct{ Program, Package string }{
	{"mmdebstrap", "mmdebstrap"},
	{"mke2fs", "e2fsprogs"},
	{"qemu-img", "qemu-utils"},
	{"npm", "npm"},
	{"dpkg-query", "dpkg"},
}

// Check says what keeps this machine from building: not root, a tool
// missing. The message names what to run.
func Check() error {
	var missing, pkgs []string
	for _, t := range Tools {
		if _, err := exec.LookPath(t.Program); err != nil {
			missing = append(missing, t.Program)
			pkgs = append(pkgs, t.Package)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("the golden image build needs %s: apt-get install -y %s", strings.Join(missing, ", "), strings.Join(pkgs, " "))
	}
	if os.Geteuid() != 0 {
		return errors.New("the golden image build must run as root (mmdebstrap installs the packages as root and mke2fs -d keeps their owners): run it with sudo")
	}
	return nil
}

// Build builds the golden image into o.Out unless one of the same inputs is
// registered. Cancelling ctx stops it (mmdebstrap gets SIGTERM and cleans its
// mounts up) and removes what it made; Out is then left without a manifest.
func Build(ctx context.Context, o Options) (_ Result, err error) {
	if o.Log == nil {
		o.Log = func(string, ...any) {}
	}
	if o.Registered == nil {
		o.Registered = func(string) (protocol.ImageManifest, bool) { return protocol.ImageManifest{}, false }
	}
	if o.Lists == "" {
		o.Lists = "/var/lib/apt/lists"
	}
	if err := Check(); err != nil {
		return Result{}, err
	}
	for _, d := range []string{o.Out, o.Work, filepath.Join(o.Work, "debs")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return Result{}, fmt.Errorf("make %s: %w", d, err)
		}
	}
	sources, err := hostSources(o.Sources)
	if err != nil {
		return Result{}, err
	}
	digest, inputs, err := inputsDigest(sources, o.Lists)
	if err != nil {
		return Result{}, err
	}
	if m, ok := o.Registered(digest); ok {
		o.Log("golden image %s already registered (inputs unchanged)", m.Version)
		return Result{Manifest: m}, nil
	}
	version := time.Now().UTC().Format("20060102T150405Z") + "-" + digest
	o.Log("building golden image %s", version)

	scratch, err := os.MkdirTemp(o.Work, "build-")
	if err != nil {
		return Result{}, fmt.Errorf("make a scratch folder in %s: %w", o.Work, err)
	}
	// apt downloads as its sandbox user _apt, who must reach the new root.
	if err := os.Chmod(scratch, 0o755); err != nil {
		return Result{}, err
	}
	root := filepath.Join(scratch, "root")
	// A build that fails keeps its work (ref 3.2 .golden-<v>.work), for a
	// person to read what the failed step left; a stopped or finished one
	// removes it. The next build removes what an earlier failure kept.
	var failed bool
	defer func() {
		if failed && ctx.Err() == nil {
			kept := filepath.Join(o.Work, KeptWorkPrefix+version+".work")
			if kerr := keepWork(scratch, root, kept); kerr != nil {
				o.Log("%v", kerr)
			} else {
				err = fmt.Errorf("%w\nwhat the build made is kept in %s for a look (the next build removes it; or: sudo rm -rf %s)", err, kept, kept)
			}
			return
		}
		if err := removeTree(scratch, root); err != nil {
			o.Log("%v", err)
		}
	}()
	removeKeptWork(o.Work, o.Log)
	b := &build{o: o, scratch: scratch, root: root, start: time.Now()}

	steps := []struct {
		name string
		run  func(context.Context) error
	}{
		{"npm: @playwright/mcp from the lock file", b.npm},
		{"overlay: the files of the recipe", b.overlay},
		{"mmdebstrap: Debian " + Suite + " packages, then provision.sh", func(ctx context.Context) error { return b.mmdebstrap(ctx, sources) }},
		{"manifest: the packages installed", b.packages},
		{"kernel and initramfs", b.kernel},
		{"file system: mke2fs -d", b.filesystem},
		{"qcow2: qemu-img convert", b.qcow2},
	}
	for i, s := range steps {
		if err := ctx.Err(); err != nil {
			return Result{}, fmt.Errorf("golden image build stopped: %w", err)
		}
		t := time.Now()
		o.Log("[%d/%d] %s", i+1, len(steps), s.name)
		if err := s.run(ctx); err != nil {
			if ctx.Err() != nil {
				return Result{}, fmt.Errorf("golden image build stopped during %s: %w", s.name, ctx.Err())
			}
			failed = true
			return Result{}, fmt.Errorf("golden image build, %s: %w", s.name, err)
		}
		o.Log("      done in %s", time.Since(t).Round(100*time.Millisecond))
	}
	for k, v := range b.inputs {
		inputs[k] = v
	}
	m := protocol.ImageManifest{
		Kind: protocol.ImageKindGolden, Version: version, File: DiskFile,
		Description: fmt.Sprintf("golden image: Debian %s, systemd, Xvfb and XFCE, Chromium %s, Node %s, @playwright/mcp %s, kernel %s",
			Suite, b.versions["chromium"], b.versions["nodejs"], b.mcpVersion, b.kver),
		Inputs:  inputs,
		Boot:    &protocol.DirectBoot{Kernel: KernelFile, Initrd: InitrdFile, Append: KernelAppend},
		Desktop: true,
	}
	disk, kernel, initrd := filepath.Join(o.Out, DiskFile), filepath.Join(o.Out, KernelFile), filepath.Join(o.Out, InitrdFile)
	if m.SHA256, m.Size, err = artifact.FileSHA256(disk); err != nil {
		return Result{}, err
	}
	if m.Boot.KernelSHA256, _, err = artifact.FileSHA256(kernel); err != nil {
		return Result{}, err
	}
	if m.Boot.InitrdSHA256, _, err = artifact.FileSHA256(initrd); err != nil {
		return Result{}, err
	}
	m.Created = time.Now().UTC().Format(time.RFC3339)
	mp := filepath.Join(o.Out, ManifestFile)
	if err := artifact.WriteManifest(mp, m); err != nil {
		return Result{}, err
	}
	o.Log("golden image %s built in %s (%d packages, %.0f MiB qcow2)", version, time.Since(b.start).Round(time.Second), len(b.versions), float64(m.Size)/(1<<20))
	return Result{Manifest: m, ManifestPath: mp}, nil
}

// build is one run's state, filled step by step.
type build struct {
	o             Options
	scratch, root string
	start         time.Time
	// npmDir holds node_modules of the lock file; overlayDir the rootfs
	// files with their placeholders filled.
	npmDir, overlayDir string
	versions           map[string]string // Debian package -> version
	inputs             map[string]string
	kver, mcpVersion   string
}

// inputsDigest is the digest of everything the image is made of: the
// builder's version, the recipe (packages, rootfs files, provision.sh, the npm
// lock, the kernel command line, the size), the apt sources used and the
// Release files apt holds for them. A changed package in the archive shows
// as a changed Release file once the host's apt-get update has seen it, so an
// unchanged digest means the same packages would be installed.
func inputsDigest(sources []byte, lists string) (string, map[string]string, error) {
	h := sha256.New()
	inputs := map[string]string{}
	fmt.Fprintln(h, builderVersion, Suite, Variant, KernelAppend, ImageBytes, RootLabel, Screen)
	fmt.Fprintln(h, strings.Join(Packages, " "))
	recipe := sha256.New()
	if err := artifact.HashFiles(recipe, recipeFS, "."); err != nil {
		return "", nil, err
	}
	inputs["recipe"] = hex.EncodeToString(recipe.Sum(nil))
	fmt.Fprintln(h, inputs["recipe"])
	// The placeholders' values come from Go constants, not the files.
	fmt.Fprintln(h, subst.Replace("@SEED_LABEL@ @SEED_CONFIG@ @SEED_ENGINE_ENV@ @SEED_SUDOERS@ @SEED_META@ @GUEST_CONFIG@ @ENGINE_ENV@ @RUNTIME_LABEL@ @RUNTIME_MOUNT@ @RUNTIME_UNITS@ @AGENTD_DIR@ @AGENT_DIR@ @DISPLAY@"))
	inputs["apt-sources"] = fmt.Sprintf("%x", sha256.Sum256(sources))
	fmt.Fprintln(h, inputs["apt-sources"])
	releases, err := releaseFiles(lists, suitesOf(sources))
	if err != nil {
		return "", nil, err
	}
	for _, r := range releases {
		sum, _, err := artifact.FileSHA256(r)
		if err != nil {
			return "", nil, err
		}
		inputs["apt-release:"+filepath.Base(r)] = sum
		fmt.Fprintln(h, filepath.Base(r), sum)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], inputs, nil
}

// releaseFiles are the InRelease (or Release) files of apt's lists for the
// suites, sorted. None at all means apt-get update never ran.
func releaseFiles(lists string, suites []string) ([]string, error) {
	var out []string
	for _, s := range suites {
		for _, name := range []string{"InRelease", "Release"} {
			m, _ := filepath.Glob(filepath.Join(lists, "*_dists_"+s+"_"+name))
			out = append(out, m...)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("apt has no Release file of %s in %s: run apt-get update first", strings.Join(suites, ", "), lists)
	}
	sort.Strings(out)
	return out, nil
}

// npm installs @playwright/mcp from the committed lock file (npm ci: exact
// versions, integrity checked, no install scripts, no browser download) into
// a folder that becomes /opt/playwright-mcp. npm's own cache lives in Work.
func (b *build) npm(ctx context.Context) error {
	b.npmDir = filepath.Join(b.scratch, "playwright-mcp")
	if err := os.MkdirAll(b.npmDir, 0o755); err != nil {
		return err
	}
	for _, f := range []string{"package.json", "package-lock.json"} {
		data, err := recipeFS.ReadFile("npm/" + f)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(b.npmDir, f), data, 0o644); err != nil {
			return err
		}
	}
	cmd := exec.CommandContext(ctx, "npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--omit=optional",
		"--cache", filepath.Join(b.o.Work, "npm-cache"))
	cmd.Dir = b.npmDir
	cmd.Env = append(os.Environ(), "PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1", "npm_config_update_notifier=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("npm ci: %w\n%s", err, tail(out))
	}
	var lock struct {
		Packages map[string]struct {
			Version, Integrity string
			Optional           bool
		} `json:"packages"`
	}
	data, err := recipeFS.ReadFile("npm/package-lock.json")
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, &lock); err != nil {
		return fmt.Errorf("read npm/package-lock.json: %w", err)
	}
	b.inputs = map[string]string{}
	for p, v := range lock.Packages {
		name, ok := strings.CutPrefix(p, "node_modules/")
		if !ok || v.Optional {
			continue
		}
		b.inputs["npm:"+name] = v.Version + " " + v.Integrity
		if name == "@playwright/mcp" {
			b.mcpVersion = v.Version
		}
	}
	if b.mcpVersion == "" {
		return errors.New("npm/package-lock.json has no @playwright/mcp")
	}
	return nil
}

// overlay writes rootfs/ with its placeholders filled, the npm folder and
// provision.sh into one folder that mmdebstrap copies into the new root.
func (b *build) overlay(context.Context) error {
	b.overlayDir = filepath.Join(b.scratch, "overlay")
	err := fs.WalkDir(recipeFS, "rootfs", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		dest := filepath.Join(b.overlayDir, strings.TrimPrefix(p, "rootfs"))
		if d.IsDir() {
			return os.MkdirAll(dest, 0o755)
		}
		data, err := recipeFS.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(dest, []byte(subst.Replace(string(data))), fileMode(p))
	})
	if err != nil {
		return fmt.Errorf("write the overlay: %w", err)
	}
	// provision.sh is copied into the new root's /tmp on its own (copying
	// a tmp/ folder in would change the mode of /tmp) and removed after.
	data, err := recipeFS.ReadFile("provision.sh")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(b.scratch, "provision.sh"), data, 0o755); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(b.overlayDir, "opt"), 0o755); err != nil {
		return err
	}
	return os.Rename(b.npmDir, filepath.Join(b.overlayDir, "opt", "playwright-mcp"))
}

// fileMode is the mode of a rootfs file: programs under the bin, sbin and
// lib/invisible-dots folders are executable, the rest is read by all.
func fileMode(p string) os.FileMode {
	for _, dir := range []string{"rootfs/usr/local/bin/", "rootfs/usr/local/sbin/", "rootfs/usr/local/lib/invisible-dots/"} {
		if strings.HasPrefix(p, dir) {
			return 0o755
		}
	}
	return 0o644
}

// mmdebstrap installs the packages into the new root, keeping the .debs in
// Work/debs between runs (sync-in before apt, sync-out after), then copies
// the overlay in and runs provision.sh inside the root, with mmdebstrap's own
// mounts of /proc, /sys and /dev in place.
func (b *build) mmdebstrap(ctx context.Context, sources []byte) error {
	// mmdebstrap reads a file named *.sources as deb822.
	srcFile := filepath.Join(b.scratch, "debian.sources")
	if err := os.WriteFile(srcFile, sources, 0o644); err != nil {
		return err
	}
	debs := filepath.Join(b.o.Work, "debs")
	args := []string{
		"--mode=root", "--variant=" + Variant, "--format=directory", "--verbose",
		"--skip=essential/unlink",
		"--include=" + strings.Join(Packages, ","),
		"--setup-hook=mkdir -p \"$1\"/var/cache/apt/archives/",
		"--setup-hook=sync-in " + debs + " /var/cache/apt/archives/",
		"--customize-hook=sync-out /var/cache/apt/archives " + debs,
		"--customize-hook=sync-in " + b.overlayDir + " /",
		"--customize-hook=copy-in " + filepath.Join(b.scratch, "provision.sh") + " /tmp",
		"--customize-hook=chroot \"$1\" /bin/sh -eu /tmp/provision.sh",
		"--customize-hook=rm -f \"$1\"/tmp/provision.sh",
		Suite, b.root, srcFile,
	}
	cmd := exec.CommandContext(ctx, "mmdebstrap", args...)
	// Its own process group: a Ctrl-C on the terminal reaches this process,
	// which then sends the group one SIGTERM: apt and dpkg stop (the root is
	// thrown away anyway), and mmdebstrap, told alone, would wait for them to
	// finish the whole install first. mmdebstrap's handler then unmounts what
	// it mounted in the root; a SIGKILL comes only if it hangs, and
	// removeTree unmounts whatever that leaves.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 2 * time.Minute
	logPath := filepath.Join(b.o.Work, "mmdebstrap.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	p := newProgress(b.o.Log)
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(logFile, line)
			p.line(line)
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	err = cmd.Run()
	pw.Close()
	<-done
	p.finish()
	if err != nil {
		return fmt.Errorf("mmdebstrap: %w (its output is in %s)", err, logPath)
	}
	return nil
}

// packages records every installed package and its version, read from the
// new root's dpkg database, as the manifest's "deb:<name>" inputs.
func (b *build) packages(ctx context.Context) error {
	out, err := exec.CommandContext(ctx, "dpkg-query", "--admindir="+filepath.Join(b.root, "var/lib/dpkg"),
		"-W", "-f=${db:Status-Abbrev}\t${Package}\t${Version}\n").Output()
	if err != nil {
		return fmt.Errorf("dpkg-query in the new root: %w", err)
	}
	b.versions = map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 3 || !strings.HasPrefix(f[0], "ii") {
			continue
		}
		b.versions[f[1]] = f[2]
		b.inputs["deb:"+f[1]] = f[2]
	}
	for _, want := range Packages {
		if _, ok := b.versions[want]; !ok {
			return fmt.Errorf("%s is not installed in the new root", want)
		}
	}
	return nil
}

// kernel copies the kernel and the initramfs the packages made out of the
// new root's /boot.
func (b *build) kernel(context.Context) error {
	kernels, _ := filepath.Glob(filepath.Join(b.root, "boot", "vmlinuz-*"))
	if len(kernels) != 1 {
		return fmt.Errorf("the new root holds %d kernels in /boot, want one", len(kernels))
	}
	b.kver = strings.TrimPrefix(filepath.Base(kernels[0]), "vmlinuz-")
	initrd := filepath.Join(b.root, "boot", "initrd.img-"+b.kver)
	if err := artifact.CopyFile(kernels[0], filepath.Join(b.o.Out, KernelFile), 0o444); err != nil {
		return err
	}
	if err := artifact.CopyFile(initrd, filepath.Join(b.o.Out, InitrdFile), 0o444); err != nil {
		return err
	}
	b.inputs["kernel"] = b.kver
	return nil
}

// filesystem makes the ext4 file system of the new root with mke2fs -d,
// which copies a directory into the file system it makes: no loop device,
// no mount.
func (b *build) filesystem(ctx context.Context) error {
	raw := filepath.Join(b.scratch, "root.ext4")
	if err := artifact.SparseFile(raw, ImageBytes); err != nil {
		return err
	}
	// Lazy inode table init leaves the tables for the guest's kernel to
	// zero in the background; mke2fs writes them now (a file is not a
	// device that can discard), so qemu-img skips those zeros.
	cmd := exec.CommandContext(ctx, "mke2fs", "-q", "-F", "-t", "ext4", "-L", RootLabel, "-m", "1",
		"-E", "lazy_itable_init=0,lazy_journal_init=0", "-d", b.root, raw)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("mke2fs -d: %w\n%s", err, tail(out))
	}
	return nil
}

// qcow2 converts the file system into the image, written under a temporary
// name in Out and renamed last.
func (b *build) qcow2(ctx context.Context) error {
	raw := filepath.Join(b.scratch, "root.ext4")
	dest := filepath.Join(b.o.Out, DiskFile)
	tmp := dest + ".part"
	_ = os.Remove(tmp)
	if out, err := exec.CommandContext(ctx, "qemu-img", "convert", "-f", "raw", "-O", "qcow2", raw, tmp).CombinedOutput(); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("qemu-img convert: %w\n%s", err, tail(out))
	}
	if err := os.Chmod(tmp, 0o444); err != nil {
		return err
	}
	return os.Rename(tmp, dest)
}

// KeptWorkPrefix begins the name of the work folder a failed build keeps in
// Options.Work: .golden-<version>.work (ref 3.2).
const KeptWorkPrefix = ".golden-"

// keepWork keeps a failed build's scratch folder as kept: what mmdebstrap
// left mounted in its root is unmounted first (as removeTree does), so
// nothing of the host stays reachable through it.
func keepWork(scratch, root, kept string) error {
	if err := unmountUnder(scratch, root); err != nil {
		return err
	}
	if err := os.Rename(scratch, kept); err != nil {
		return fmt.Errorf("keep the failed build's work as %s: %w", kept, err)
	}
	return nil
}

// removeKeptWork removes the work folders earlier failed builds kept in
// work, saying each: only the newest failure is worth a look.
func removeKeptWork(work string, logf func(string, ...any)) {
	matches, _ := filepath.Glob(filepath.Join(work, KeptWorkPrefix+"*.work"))
	for _, dir := range matches {
		if err := removeTree(dir, filepath.Join(dir, "root")); err != nil {
			logf("%v", err)
			continue
		}
		logf("removed %s, the work an earlier failed build kept", dir)
	}
}

// removeTree removes a build's scratch folder, but never while anything is
// mounted below it: mmdebstrap mounts /proc, /sys and /dev of the host into
// the new root, and removing through such a mount would delete the host's
// files. A mount it left behind (it was killed) is unmounted first.
func removeTree(dir, root string) error {
	if err := unmountUnder(dir, root); err != nil {
		return fmt.Errorf("not removing %s: %w", dir, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	return nil
}

// unmountUnder unmounts what is mounted at or below root, deepest first.
func unmountUnder(dir, root string) error {
	mounts, err := mountsUnder(root)
	if err != nil {
		return fmt.Errorf("cannot read the mounts: %w", err)
	}
	sort.Sort(sort.Reverse(sort.StringSlice(mounts)))
	for _, m := range mounts {
		_ = syscall.Unmount(m, syscall.MNT_DETACH)
	}
	if mounts, err = mountsUnder(root); err != nil || len(mounts) > 0 {
		return fmt.Errorf("%s is still mounted; unmount it (umount -R) and remove %s", strings.Join(mounts, ", "), dir)
	}
	return nil
}

// mountsUnder lists the mount points at or below dir (/proc/self/mountinfo).
func mountsUnder(dir string) ([]string, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	dir = filepath.Clean(dir)
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		mp := unescapeMount(f[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	return out, nil
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var c byte
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &c); err == nil {
				b.WriteByte(c)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func tail(out []byte) string {
	const max = 4000
	if len(out) > max {
		out = out[len(out)-max:]
	}
	return strings.TrimSpace(string(out))
}
