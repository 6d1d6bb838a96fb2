package golden

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/invisible-dots/invisible-dots/guest/image/artifact"
	"github.com/invisible-dots/invisible-dots/guest/image/runtimeiso"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/home"
)

// The recipe test reads the built image's file system (no boot): the
// packages, the users of ref 4.1, the units, the hardening of ref 4.1 and
// 4.3. It takes the newest golden image with the desktop registered in
// GOLDEN_IMAGE_HOME, else INVISIBLE_DOTS_HOME (or ~/.invisible-dots), turns
// its qcow2 into a raw file system with qemu-img and reads that with
// debugfs (e2fsprogs), so no mount and no root are needed. Without a built
// image it is skipped, saying how to build one; CI builds one first
// (make golden-image).

var (
	builtOnce sync.Once
	built     *builtImage
	builtSkip string
	builtErr  error
)

type builtImage struct {
	manifest protocol.ImageManifest
	fs       *ext4
}

func builtGolden(t *testing.T) *builtImage {
	t.Helper()
	builtOnce.Do(func() {
		var h home.Layout
		var err error
		if dir := os.Getenv("GOLDEN_IMAGE_HOME"); dir != "" {
			h, err = home.New(dir)
		} else {
			h, err = home.FromEnv()
		}
		if err != nil {
			builtErr = err
			return
		}
		m, file, ok := latestDesktop(h)
		if !ok {
			builtSkip = "no golden image with the desktop in " + h.Images() + ": build one with make golden-image (as root), or set GOLDEN_IMAGE_HOME to a home that has one"
			return
		}
		for _, tool := range []string{"qemu-img", "debugfs"} {
			if _, err := exec.LookPath(tool); err != nil {
				builtSkip = tool + " is not installed (apt-get install -y qemu-utils e2fsprogs)"
				return
			}
		}
		dir, err := os.MkdirTemp("", "golden-recipe-")
		if err != nil {
			builtErr = err
			return
		}
		raw := filepath.Join(dir, "root.ext4")
		if out, err := exec.Command("qemu-img", "convert", "-f", "qcow2", "-O", "raw", file, raw).CombinedOutput(); err != nil {
			builtErr = fmt.Errorf("qemu-img convert %s: %v: %s", file, err, out)
			return
		}
		built = &builtImage{manifest: m, fs: &ext4{raw: raw, dir: dir}}
	})
	if builtSkip != "" {
		t.Skip(builtSkip)
	}
	if builtErr != nil {
		t.Fatal(builtErr)
	}
	return built
}

// latestDesktop finds the newest golden image whose manifest says Desktop
// (hostagent/images.LatestDesktop, which this guest package does not
// import).
func latestDesktop(h home.Layout) (protocol.ImageManifest, string, bool) {
	manifests, _ := filepath.Glob(filepath.Join(h.Images(), "golden-*.json"))
	sort.Sort(sort.Reverse(sort.StringSlice(manifests)))
	for _, mp := range manifests {
		m, err := artifact.ReadManifest(mp)
		if err != nil || !m.Desktop {
			continue
		}
		file := filepath.Join(h.Images(), m.File)
		if _, err := os.Stat(file); err == nil {
			return m, file, true
		}
	}
	return protocol.ImageManifest{}, "", false
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built != nil {
		os.RemoveAll(built.fs.dir)
	}
	os.Exit(code)
}

// ext4 reads a raw ext4 file system with debugfs.
type ext4 struct {
	raw, dir string
	once     sync.Once
	entries  map[string]entry
	err      error
}

type entry struct {
	mode     uint32 // st_mode as debugfs prints it (file type and permissions)
	uid, gid int
}

func (e entry) perm() os.FileMode { return os.FileMode(e.mode & 0o7777) }
func (e entry) isDir() bool       { return e.mode&0o170000 == 0o040000 }
func (e entry) isReg() bool       { return e.mode&0o170000 == 0o100000 }

func (f *ext4) cat(t *testing.T, p string) string {
	t.Helper()
	out, err := exec.Command("debugfs", "-R", "cat "+p, f.raw).Output()
	if err != nil {
		t.Fatalf("debugfs cat %s: %v", p, err)
	}
	return string(out)
}

// walk lists every file of the file system with its mode and owner, one
// debugfs run per directory depth ("ls -p" of each directory of the level).
func (f *ext4) walk(t *testing.T) map[string]entry {
	t.Helper()
	f.once.Do(func() {
		f.entries = map[string]entry{"/": {mode: 0o040755}}
		level := []string{"/"}
		for depth := 0; len(level) > 0; depth++ {
			if depth > 64 {
				f.err = fmt.Errorf("directories deeper than 64 levels")
				return
			}
			cmds := filepath.Join(f.dir, "cmds")
			var b strings.Builder
			for _, d := range level {
				fmt.Fprintf(&b, "ls -p %q\n", d)
			}
			if err := os.WriteFile(cmds, []byte(b.String()), 0o644); err != nil {
				f.err = err
				return
			}
			out, err := exec.Command("debugfs", "-f", cmds, f.raw).Output()
			if err != nil {
				f.err = fmt.Errorf("debugfs: %w", err)
				return
			}
			var next []string
			dir := ""
			sc := bufio.NewScanner(strings.NewReader(string(out)))
			sc.Buffer(make([]byte, 1<<20), 1<<20)
			for sc.Scan() {
				line := sc.Text()
				if rest, ok := strings.CutPrefix(line, "debugfs: ls -p "); ok {
					dir, _ = strconv.Unquote(rest)
					continue
				}
				// /inode/mode/uid/gid/name/size/
				parts := strings.Split(line, "/")
				if len(parts) < 7 || dir == "" {
					continue
				}
				name := strings.Join(parts[5:len(parts)-2], "/")
				if name == "." || name == ".." || name == "" {
					continue
				}
				mode, err1 := strconv.ParseUint(parts[2], 8, 32)
				uid, err2 := strconv.Atoi(parts[3])
				gid, err3 := strconv.Atoi(parts[4])
				if err1 != nil || err2 != nil || err3 != nil {
					continue
				}
				p := filepath.Join(dir, name)
				e := entry{mode: uint32(mode), uid: uid, gid: gid}
				f.entries[p] = e
				if e.isDir() {
					next = append(next, p)
				}
			}
			level = next
		}
	})
	if f.err != nil {
		t.Fatal(f.err)
	}
	return f.entries
}

// passwd and group parse /etc/passwd and /etc/group of the image.
type account struct{ name, uid, gid, home, shell string }

func passwd(t *testing.T, f *ext4) map[string]account {
	out := map[string]account{}
	for _, line := range strings.Split(f.cat(t, "/etc/passwd"), "\n") {
		p := strings.Split(line, ":")
		if len(p) == 7 {
			out[p[0]] = account{name: p[0], uid: p[2], gid: p[3], home: p[5], shell: p[6]}
		}
	}
	return out
}

// groups returns group name -> its gid and members.
func groups(t *testing.T, f *ext4) map[string][]string {
	out := map[string][]string{}
	for _, line := range strings.Split(f.cat(t, "/etc/group"), "\n") {
		p := strings.Split(line, ":")
		if len(p) == 4 {
			members := []string{p[2]}
			if p[3] != "" {
				members = append(members, strings.Split(p[3], ",")...)
			}
			out[p[0]] = members
		}
	}
	return out
}

// groupsOf lists the supplementary groups that name user.
func groupsOf(g map[string][]string, user string) []string {
	var out []string
	for name, m := range g {
		if slices.Contains(m[1:], user) {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

func TestRecipePackages(t *testing.T) {
	img := builtGolden(t)
	status := img.fs.cat(t, "/var/lib/dpkg/status")
	installed := map[string]string{}
	var name string
	for _, line := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(line, "Package: "); ok {
			name = v
		}
		if v, ok := strings.CutPrefix(line, "Status: "); ok && v == "install ok installed" {
			installed[name] = ""
		}
		if v, ok := strings.CutPrefix(line, "Version: "); ok {
			if _, in := installed[name]; in {
				installed[name] = v
			}
		}
	}
	for _, p := range Packages {
		if _, ok := installed[p]; !ok {
			t.Errorf("package %s is in the recipe but not installed in the image", p)
		}
	}
	// The manifest records every installed package with its version.
	for p, v := range installed {
		if got := img.manifest.Inputs["deb:"+p]; got != v {
			t.Errorf("manifest records %s as %q, the image has %q", p, got, v)
		}
	}
	for k := range img.manifest.Inputs {
		if p, ok := strings.CutPrefix(k, "deb:"); ok {
			if _, in := installed[p]; !in {
				t.Errorf("manifest records %s, which the image does not hold", p)
			}
		}
	}
	// What the image must not hold: cloud-init (the seed is read by
	// dots-seed), a way to root through policy kit, a remote login, a
	// boot loader (the host boots the kernel directly).
	for _, p := range []string{"cloud-init", "pkexec", "policykit-1", "polkitd", "openssh-server", "grub-pc", "grub-efi-amd64"} {
		if _, ok := installed[p]; ok {
			t.Errorf("package %s is installed; the recipe leaves it out", p)
		}
	}
	// Node from Debian, and @playwright/mcp as the lock pins it.
	if v := installed["nodejs"]; !strings.Contains(v, "deb12") && !strings.HasPrefix(v, "18.") {
		t.Errorf("nodejs %s: want Debian 12's", v)
	}
	var lock struct {
		Packages map[string]struct{ Version string } `json:"packages"`
	}
	data, _ := recipeFS.ReadFile("npm/package-lock.json")
	if err := json.Unmarshal(data, &lock); err != nil {
		t.Fatal(err)
	}
	var pkg struct{ Version string }
	if err := json.Unmarshal([]byte(img.fs.cat(t, "/opt/playwright-mcp/node_modules/@playwright/mcp/package.json")), &pkg); err != nil {
		t.Fatalf("@playwright/mcp's package.json in the image: %v", err)
	}
	if want := lock.Packages["node_modules/@playwright/mcp"].Version; pkg.Version != want || want == "" {
		t.Errorf("@playwright/mcp in the image is %q, the lock pins %q", pkg.Version, want)
	}
	if got := img.manifest.Inputs["npm:@playwright/mcp"]; !strings.HasPrefix(got, pkg.Version+" sha512-") {
		t.Errorf("manifest records @playwright/mcp as %q, want its version and integrity", got)
	}
	files := img.fs.walk(t)
	// import is an alternatives link (import-im6.q16): present is enough.
	for _, p := range []string{"/usr/lib/chromium/chromium", "/usr/bin/node", "/usr/bin/Xvfb", "/usr/bin/xfce4-session", "/usr/bin/import", MCPCommand,
		"/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf", "/usr/share/fonts/truetype/liberation2/LiberationSans-Regular.ttf"} {
		if _, ok := files[p]; !ok {
			t.Errorf("%s is not in the image", p)
		}
	}
}

func TestRecipeUsers(t *testing.T) {
	img := builtGolden(t)
	users := passwd(t, img.fs)
	g := groups(t, img.fs)
	type want struct {
		home, shell string
		groups      []string
	}
	tests := map[string]struct {
		reason string
		want   want
	}{
		protocol.UserDot: {"runs the desktop, the browser and every command of the model; reads its journal (ref 4.1)",
			want{"/home/dot", "/bin/bash", []string{"audio", "systemd-journal", "video"}}},
		protocol.UserDotAgentd: {"runs dot-agentd: no home, no login, no group but its own",
			want{"/nonexistent", "/usr/sbin/nologin", nil}},
		protocol.UserDotEngine: {"runs the engine; in group dot to read and seed the workspace",
			want{"/home/dotengine", "/usr/sbin/nologin", []string{"dot"}}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			u, ok := users[name]
			if !ok {
				t.Fatalf("%s: no user %s in /etc/passwd", tc.reason, name)
			}
			got := want{u.home, u.shell, groupsOf(g, name)}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("%s: user %s (-want +got):\n%s", tc.reason, name, diff)
			}
			if primary, ok := g[name]; !ok || primary[0] != u.gid {
				t.Errorf("%s: user %s's primary group is gid %s, want its own group %s", tc.reason, name, u.gid, name)
			}
		})
	}
	// No user shares a uid with another.
	seen := map[string]string{}
	for n, u := range users {
		if other, ok := seen[u.uid]; ok {
			t.Errorf("users %s and %s share uid %s", n, other, u.uid)
		}
		seen[u.uid] = n
	}
	files := img.fs.walk(t)
	uid := func(n string) int { v, _ := strconv.Atoi(users[n].uid); return v }
	for _, d := range []struct {
		path  string
		owner string
		perm  os.FileMode
	}{
		{"/home/dot", protocol.UserDot, 0o750},
		{"/home/dot/workspace", protocol.UserDot, 0o2775},
		{"/home/dotengine", protocol.UserDotEngine, 0o700},
		{"/home/dotengine/state", protocol.UserDotEngine, 0o700},
		{"/var/lib/invisible-dots", "root", 0o755},
		{"/var/lib/invisible-dots/mcp", protocol.UserDot, 0o700},
	} {
		e, ok := files[d.path]
		if !ok || !e.isDir() {
			t.Errorf("%s is not a directory in the image (ref 4.2)", d.path)
			continue
		}
		if e.uid != uid(d.owner) || e.perm() != d.perm {
			t.Errorf("%s is uid %d mode %04o, want %s (uid %d) mode %04o (ref 4.2)", d.path, e.uid, e.perm(), d.owner, uid(d.owner), d.perm)
		}
	}
}

func TestRecipeUnits(t *testing.T) {
	img := builtGolden(t)
	files := img.fs.walk(t)
	for _, u := range []string{"dot-desktop.service", "dots-seed.service", "dots-runtime.service", "systemd-networkd.service"} {
		link := "/etc/systemd/system/multi-user.target.wants/" + u
		if _, ok := files[link]; !ok {
			t.Errorf("%s is not enabled (no %s)", u, link)
		}
	}
	unitHas := func(t *testing.T, name, text string, want ...string) {
		t.Helper()
		lines := strings.Split(text, "\n")
		for _, w := range want {
			if !slices.Contains(lines, w) {
				t.Errorf("%s has no line %q", name, w)
			}
		}
	}
	// The desktop runs as dot, Xvfb without TCP and an XFCE session.
	desktop := img.fs.cat(t, "/etc/systemd/system/dot-desktop.service")
	unitHas(t, "dot-desktop.service", desktop, "User=dot", "Group=dot", "NoNewPrivileges=yes", "LimitCORE=0")
	script := img.fs.cat(t, "/usr/local/lib/invisible-dots/dot-desktop")
	for _, w := range []string{"Xvfb " + Display + " -nolisten tcp", "xfce4-session"} {
		if !strings.Contains(script, w) {
			t.Errorf("the desktop's script does not run %q:\n%s", w, script)
		}
	}
	// dot-agentd and the engine come from the runtime ISO, whose units the
	// image starts (dots-runtime): as their users, the engine with
	// NoNewPrivileges and no core file (ref 4.1, 4.3).
	units, err := runtimeiso.Contents("", "")
	if err != nil {
		t.Fatal(err)
	}
	unitHas(t, "dot-agentd.service", string(units[protocol.RuntimeUnitsDir+"/dot-agentd.service"]),
		"User=dotagentd", "Group=dotagentd", "AmbientCapabilities=CAP_SETUID CAP_SETGID CAP_KILL")
	unitHas(t, "invisible-dots-agent.service", string(units[protocol.RuntimeUnitsDir+"/invisible-dots-agent.service"]),
		"User=dotengine", "Group=dotengine", "NoNewPrivileges=yes", "LimitCORE=0", "UMask=0002")
	// The runtime ISO and the root are mounted by label.
	fstab := img.fs.cat(t, "/etc/fstab")
	for _, w := range []string{"LABEL=" + RootLabel + "\t/\text4", "LABEL=" + protocol.RuntimeVolumeLabel + "\t" + protocol.RuntimeMountPoint + "\tiso9660\tro,"} {
		if !strings.Contains(fstab, w) {
			t.Errorf("fstab has no %q:\n%s", w, fstab)
		}
	}
	// The sockets' directories of ref 4.2.
	tmpfiles := img.fs.cat(t, "/etc/tmpfiles.d/invisible-dots.conf")
	for _, w := range []string{"d " + protocol.AgentdSocketDir + "\t2750\tdotagentd\tdotengine", "d " + protocol.AgentSocketDir + "\t2750\tdotengine\tdotagentd"} {
		if !strings.Contains(tmpfiles, w) {
			t.Errorf("tmpfiles has no %q:\n%s", w, tmpfiles)
		}
	}
}

func TestRecipeHardening(t *testing.T) {
	img := builtGolden(t)
	files := img.fs.walk(t)
	// Ref 4.3: Yama lets a process trace only its descendants; nothing
	// dumps core.
	sysctl := img.fs.cat(t, "/etc/sysctl.d/60-invisible-dots.conf")
	for _, w := range []string{"kernel.yama.ptrace_scope = 1", "fs.suid_dumpable = 0"} {
		if !strings.Contains(sysctl, w) {
			t.Errorf("sysctl.d has no %q", w)
		}
	}
	if s := img.fs.cat(t, "/etc/systemd/system.conf.d/invisible-dots.conf"); !strings.Contains(s, "DefaultLimitCORE=0") {
		t.Errorf("systemd's DefaultLimitCORE is not 0:\n%s", s)
	}
	// dot cannot become root: the only setuid-root programs are the
	// allowed ones, no password works (root and dot are locked), sudo has no
	// rule for dot and dot is in no group sudo or su would honour.
	var setuid []string
	for p, e := range files {
		if e.isReg() && e.mode&0o4000 != 0 && e.uid == 0 {
			setuid = append(setuid, p)
		}
	}
	sort.Strings(setuid)
	if diff := cmp.Diff(SetuidAllowed, setuid); diff != "" {
		t.Errorf("setuid-root files (-allowed +image):\n%s", diff)
	}
	for _, line := range strings.Split(img.fs.cat(t, "/etc/shadow"), "\n") {
		p := strings.Split(line, ":")
		if len(p) < 2 || (p[0] != "root" && p[0] != protocol.UserDot) {
			continue
		}
		if !strings.HasPrefix(p[1], "!") && !strings.HasPrefix(p[1], "*") {
			t.Errorf("%s has a usable password in /etc/shadow; want it locked", p[0])
		}
	}
	g := groups(t, img.fs)
	for _, grp := range []string{"sudo", "root", "adm", "wheel", "staff", "disk", "shadow", "dotagentd", "dotengine"} {
		if slices.Contains(groupsOf(g, protocol.UserDot), grp) {
			t.Errorf("dot is in group %s", grp)
		}
	}
	sudoers := img.fs.cat(t, "/etc/sudoers")
	for _, line := range strings.Split(sudoers, "\n") {
		if f := strings.Fields(line); len(f) > 0 && (f[0] == protocol.UserDot || f[0] == protocol.UserDotEngine) {
			t.Errorf("/etc/sudoers gives %s a rule: %q", f[0], line)
		}
	}
	// The image gives nobody a rule of its own: the Dot's seed writes
	// dotagentd's (ref 4.1), and holds no token.
	for p := range files {
		if strings.HasPrefix(p, "/etc/sudoers.d/") && p != "/etc/sudoers.d/README" {
			t.Errorf("%s is in the image; the Dot's seed writes the one rule", p)
		}
	}
	if _, ok := files[protocol.GuestConfigPath]; ok {
		t.Errorf("%s is in the image; the token comes from the seed", protocol.GuestConfigPath)
	}
	// The boot the manifest asks for.
	if b := img.manifest.Boot; b == nil || b.Append != KernelAppend {
		t.Errorf("manifest boot = %+v, want the kernel command line %q", b, KernelAppend)
	}
}
