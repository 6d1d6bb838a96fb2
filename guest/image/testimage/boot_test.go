package testimage

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/invisible-dots/invisible-dots/guest/image/isofs"
	"github.com/invisible-dots/invisible-dots/guest/image/runtimeiso"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// tcgCPUModel is the host agent's CPU model under TCG (hostconfig.CPUModelTCG
// in the host agent, which guest/ does not import).
const tcgCPUModel = "qemu64,-vmx,-svm"

// image is one built image: its manifest and the folder holding its files.
type image struct {
	dir string
	protocol.ImageManifest
}

// path is the path of a file the manifest names.
func (i image) path(name string) string { return filepath.Join(i.dir, name) }

// builtImage builds the test image into a fresh folder from the cache `make
// test-image` fills, or skips when that has not run: downloading a kernel is
// not a unit test's business.
func builtImage(t testing.TB) (golden, runtime image) {
	t.Helper()
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Skip("qemu-system-x86_64 is not installed (apt-get install qemu-system-x86)")
	}
	wd, _ := os.Getwd()
	repo, err := FindRepo(wd)
	if err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(repo, "_output", "test-image")
	k, _ := filepath.Glob(filepath.Join(work, "debs", "linux-image-*.deb"))
	b, _ := filepath.Glob(filepath.Join(work, "debs", BusyboxPackage+"_*.deb"))
	if len(k) == 0 || len(b) == 0 {
		t.Skipf("the test image is not built: run make test-image (it caches Debian's packages in %s)", work)
	}
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, err := Build(ctx, Options{Out: out, Repo: repo, Work: work, Log: t.Logf})
	if err != nil {
		t.Fatalf("build the test image: %v", err)
	}
	if res.GoldenManifest != filepath.Join(out, ManifestFile) || res.RuntimeManifest != filepath.Join(out, runtimeiso.ManifestFile) {
		t.Fatalf("Build() wrote the manifests %q and %q, want both in %s", res.GoldenManifest, res.RuntimeManifest, out)
	}
	if res.Golden.Boot == nil {
		t.Fatalf("the test image's manifest has no boot section: %+v", res.Golden)
	}
	return image{out, res.Golden}, image{out, res.Runtime}
}

// vm is one boot of the test image, started the way ref 3.4's argv starts a
// Dot (TCG here, with the host agent's TCG CPU model: no monitor, nothing
// that pauses, user networking with one forward).
type vm struct {
	t      testing.TB
	cmd    *exec.Cmd
	port   int
	token  string
	serial string
	exited chan struct{}
	url    string
}

func writeSeed(path string, gc protocol.GuestConfig) error {
	cfg, err := json.Marshal(gc)
	if err != nil {
		return err
	}
	return isofs.Write(path, protocol.SeedVolumeLabel, map[string][]byte{
		protocol.SeedGuestConfigFile: cfg,
		protocol.SeedMetaDataFile:    []byte("instance-id: iid-test\nlocal-hostname: " + gc.Hostname + "\n"),
		protocol.SeedUserDataFile:    []byte("#cloud-config\n"),
	}, 0o600)
}

func freePort(t testing.TB) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// newDisk makes the Dot's overlay on the golden image.
func newDisk(t testing.TB, golden, dir string) string {
	disk := filepath.Join(dir, "disk.qcow2")
	if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", golden, disk, fmt.Sprintf("%dG", protocol.Bounds.DiskGiB.Min)).CombinedOutput(); err != nil {
		t.Fatalf("qemu-img create: %v\n%s", err, out)
	}
	return disk
}

func bootVM(t testing.TB, g, r image, dir, disk, token string) *vm {
	t.Helper()
	seed := filepath.Join(dir, "seed.iso")
	if err := writeSeed(seed, protocol.GuestConfig{DotID: "test/boot", Token: token, Hostname: "boot"}); err != nil {
		t.Fatal(err)
	}
	v := &vm{t: t, port: freePort(t), token: token, serial: filepath.Join(dir, "serial.log"), exited: make(chan struct{})}
	v.url = fmt.Sprintf("http://127.0.0.1:%d", v.port)
	v.cmd = exec.Command("qemu-system-x86_64",
		"-name", "invisible-dot-test.boot", "-machine", "q35", "-accel", "tcg", "-cpu", tcgCPUModel, "-smp", "1", "-m", "512",
		"-drive", "if=virtio,file="+disk+",format=qcow2,discard=unmap",
		"-drive", "if=virtio,file="+r.path(r.File)+",format=raw,readonly=on",
		"-drive", "if=virtio,file="+seed+",format=raw,readonly=on",
		"-netdev", fmt.Sprintf("user,id=net0,hostfwd=tcp:127.0.0.1:%d-:%d", v.port, protocol.AgentdPort),
		"-device", "virtio-net-pci,netdev=net0", "-device", "virtio-rng-pci",
		"-serial", "file:"+v.serial, "-display", "none",
		"-kernel", g.path(g.Boot.Kernel), "-initrd", g.path(g.Boot.Initrd), "-append", g.Boot.Append)
	var qlog bytes.Buffer
	v.cmd.Stdout, v.cmd.Stderr = &qlog, &qlog
	if err := v.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { v.cmd.Wait(); close(v.exited) }()
	t.Cleanup(func() {
		select {
		case <-v.exited:
		default:
			v.cmd.Process.Kill()
			<-v.exited
		}
		if t.Failed() {
			s, _ := os.ReadFile(v.serial)
			t.Logf("QEMU said: %s\nserial console:\n%s", qlog.String(), s)
		}
	})
	return v
}

// waitProof waits until the guest answers the proof through the forward and
// returns how long that took.
func (v *vm) waitProof(deadline time.Duration) time.Duration {
	v.t.Helper()
	start := time.Now()
	cl := &http.Client{Timeout: 2 * time.Second}
	for {
		nonce := make([]byte, protocol.ProofNonceBytes)
		rand.Read(nonce)
		n := hex.EncodeToString(nonce)
		resp, err := cl.Get(v.url + protocol.PathProof + "?nonce=" + n)
		if err == nil {
			var p protocol.ProofResponse
			json.NewDecoder(resp.Body).Decode(&p)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				if !protocol.ProofMatches(v.token, n, p.Proof) {
					v.t.Fatalf("the guest answered a proof that does not match its token")
				}
				return time.Since(start)
			}
		}
		select {
		case <-v.exited:
			v.t.Fatalf("QEMU exited before the guest answered")
		default:
		}
		if time.Since(start) > deadline {
			v.t.Fatalf("the guest did not answer the proof within %s", deadline)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (v *vm) call(method, path string, body io.Reader, token string) (int, []byte) {
	v.t.Helper()
	req, _ := http.NewRequest(method, v.url+path, body)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Timeout: 60 * time.Second}).Do(req)
	if err != nil {
		v.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func (v *vm) exec(command string) protocol.ExecResponse {
	v.t.Helper()
	body, _ := json.Marshal(protocol.ExecRequest{Command: command})
	status, b := v.call("POST", protocol.PathExec, bytes.NewReader(body), v.token)
	var r protocol.ExecResponse
	if status != 200 || json.Unmarshal(b, &r) != nil {
		v.t.Fatalf("exec %q = %d %s", command, status, b)
	}
	return r
}

// TestBootTestImage boots the test image under TCG and checks the guest as
// the host sees it: the proof, the token, the work as dot without a
// capability, the token out of dot's reach, files on the Dot's own disk
// surviving a restart, and a poweroff that ends QEMU by itself.
func TestBootTestImage(t *testing.T) {
	g, r := builtImage(t)
	dir := t.TempDir()
	disk := newDisk(t, g.path(g.File), dir)
	token := "boot-test-token-" + hex.EncodeToString([]byte("0123456789"))
	v := bootVM(t, g, r, dir, disk, token)
	took := v.waitProof(4 * time.Minute)
	t.Logf("the guest answered the proof %s after QEMU started (TCG)", took.Round(10*time.Millisecond))

	if status, _ := v.call("GET", protocol.PathHealth, nil, "wrong-token-wrong-token"); status != 401 {
		t.Fatalf("health with a wrong token = %d, want 401", status)
	}
	status, b := v.call("GET", protocol.PathHealth, nil, token)
	var h protocol.HealthResponse
	if status != 200 || json.Unmarshal(b, &h) != nil || h.Agentd != protocol.AgentdOK {
		t.Fatalf("health = %d %s", status, b)
	}
	// With an engine on the runtime ISO, its health comes through
	// dot-agentd (the engine starts a moment after the daemon).
	if r.Inputs[protocol.RuntimeEngineFile] != "" {
		deadline := time.Now().Add(2 * time.Minute)
		for string(h.Agent) == "null" && time.Now().Before(deadline) {
			time.Sleep(500 * time.Millisecond)
			_, b = v.call("GET", protocol.PathHealth, nil, token)
			json.Unmarshal(b, &h)
		}
		var agent struct{ Status string }
		if json.Unmarshal(h.Agent, &agent) != nil || agent.Status == "" {
			t.Fatalf("the engine's health never came through dot-agentd: %s", b)
		}
	}
	status, b = v.call("GET", protocol.PathSystem, nil, token)
	var sys protocol.SystemResponse
	if status != 200 || json.Unmarshal(b, &sys) != nil || sys.Hostname != "boot" || sys.DiskTotalBytes == 0 {
		t.Fatalf("system = %d %s, want hostname boot from the seed and the home disk", status, b)
	}
	who := v.exec("id -un; grep -E '^Cap(Inh|Prm|Eff|Amb)' /proc/self/status; cat " + protocol.GuestConfigPath)
	lines := strings.Split(strings.TrimSpace(who.Stdout), "\n")
	if len(lines) != 5 || lines[0] != protocol.UserDot {
		t.Fatalf("exec runs as %q, want dot: %+v", lines, who)
	}
	for _, l := range lines[1:] {
		if !strings.HasSuffix(l, "0000000000000000") {
			t.Errorf("a command of dot holds a capability: %s", l)
		}
	}
	if who.ExitCode == 0 || strings.Contains(who.Stdout, token) || !strings.Contains(who.Stderr, "Permission denied") {
		t.Fatalf("dot could read the guest config: %+v", who)
	}
	// The walls of ref 4.1 as the model meets them: port 1024 without the
	// token, the engine's and dot-agentd's sockets, the power door, sudo.
	walls := v.exec(`wget -q -O- http://127.0.0.1:1024/v1/health 2>&1; echo "wget=$?"
ls ` + protocol.AgentdSocketDir + ` 2>&1; ls ` + protocol.AgentSocketDir + ` 2>&1
echo poweroff 2>&1 > /run/invisible-dots-power/request; echo "power=$?"
/usr/bin/sudo -n /usr/bin/systemctl poweroff 2>&1; echo "sudo=$?"`)
	for _, want := range []string{"401", "wget=1", protocol.AgentdSocketDir + "': Permission denied", protocol.AgentSocketDir + "': Permission denied", "power=1", "sudo=1"} {
		if !strings.Contains(walls.Stdout+walls.Stderr, want) {
			t.Errorf("a command of dot got past a wall: want %q in %q %q", want, walls.Stdout, walls.Stderr)
		}
	}
	// busybox ps cuts user names at 8 characters.
	daemon := v.exec("ps -o user,args | grep '[d]ot-agentd --run-as'")
	if want := protocol.UserDotAgentd[:8] + " " + protocol.RuntimeAgentdPath; !strings.HasPrefix(strings.TrimSpace(daemon.Stdout), want) {
		t.Fatalf("dot-agentd runs as %q, want %q (dotagentd, from the runtime ISO)", daemon.Stdout, want)
	}
	if status, _ := v.call("PUT", protocol.PathFiles+"?path=notes/kept.txt", strings.NewReader("kept"), token); status != 204 {
		t.Fatalf("PUT = %d", status)
	}
	// dot-agentd (dotagentd) wrote it acting as dot: it is dot's.
	if owner := v.exec("stat -c %U:%G notes notes/kept.txt"); owner.Stdout != "dot:dot\ndot:dot\n" {
		t.Fatalf("a file PUT through dot-agentd belongs to %q, want dot:dot", owner.Stdout)
	}
	if status, b := v.call("GET", protocol.PathFiles+"?path="+protocol.GuestConfigPath, nil, token); status != 403 || !strings.Contains(string(b), protocol.ErrOutsideHome) {
		t.Fatalf("GET of the guest config = %d %s, want 403 outside_home", status, b)
	}
	if status, b := v.call("GET", protocol.PathScreenshot, nil, token); status != 503 || !strings.Contains(string(b), protocol.ErrNoDisplay) {
		t.Fatalf("screenshot on the test image = %d %s, want 503 no_display", status, b)
	}
	mounts := v.exec("grep -E ' (/home|" + protocol.RuntimeMountPoint + ") ' /proc/mounts; test -x " + protocol.RuntimeAgentdPath + " && echo agentd-on-iso")
	if !strings.Contains(mounts.Stdout, " /home ext4 ") || !strings.Contains(mounts.Stdout, protocol.RuntimeMountPoint+" iso9660 ro") || !strings.Contains(mounts.Stdout, "agentd-on-iso") {
		t.Fatalf("mounts = %q, want the Dot's disk on /home and the runtime ISO read-only", mounts.Stdout)
	}

	// Stop as the host stops a Dot: the guest powers itself off and QEMU exits.
	status, b = v.call("POST", protocol.PathPoweroff, nil, token)
	if status != http.StatusAccepted {
		t.Fatalf("poweroff = %d %s", status, b)
	}
	select {
	case <-v.exited:
	case <-time.After(60 * time.Second):
		t.Fatal("QEMU still runs 60 s after the poweroff")
	}
	if !v.cmd.ProcessState.Success() {
		t.Fatalf("QEMU exited with %v after the guest's poweroff, want 0", v.cmd.ProcessState)
	}

	// Start again on the same disk: the file is still there.
	v2 := bootVM(t, g, r, dir, disk, token)
	v2.waitProof(4 * time.Minute)
	if status, b := v2.call("GET", protocol.PathFiles+"?path=notes/kept.txt", nil, token); status != 200 || string(b) != "kept" {
		t.Fatalf("after a restart the file = %d %q, want \"kept\"", status, b)
	}
}

// BenchmarkBootToProof is QEMU start to the first answered proof through
// the forward, under TCG (the accelerator of these machines' tests).
func BenchmarkBootToProof(b *testing.B) {
	g, r := builtImage(b)
	for i := 0; i < b.N; i++ {
		dir := b.TempDir()
		disk := newDisk(b, g.path(g.File), dir)
		v := bootVM(b, g, r, dir, disk, "bench-token-0123456789")
		took := v.waitProof(4 * time.Minute)
		b.ReportMetric(took.Seconds(), "s/boot")
		v.cmd.Process.Kill()
		<-v.exited
	}
}

func TestHomeDiskFitsTheSmallestDot(t *testing.T) {
	if HomeDiskBytes > int64(protocol.Bounds.DiskGiB.Min)<<30 {
		t.Fatalf("the golden disk (%d bytes) is larger than the smallest Dot disk (%d GiB): an overlay would cut its file system", HomeDiskBytes, protocol.Bounds.DiskGiB.Min)
	}
}
