package qemu

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/hostagent/driver"
	"github.com/invisible-dots/invisible-dots/hostagent/images"
	"github.com/invisible-dots/invisible-dots/internal/home"
)

// BenchmarkStartStopTestImage boots the test image under tcg (say so when
// quoting it: KVM is much faster) and reports:
//   - start-to-health-s: Start() until GET /v1/health answers through the
//     proven channel, asked every 100 ms;
//   - boot-to-proof-s: the same image booted by QEMU alone, from QEMU's
//     spawn until GET /v1/proof answers (bootToProof), in the same run;
//   - start-to-health/boot-to-proof: the ratio of the two, what the driver
//     and the health call add to a raw boot;
//   - stop-s: the stop as the reconciler composes it (stopVM: poweroff, QEMU
//     exits by itself, Kill clears its record);
//   - idle-rss-MiB: QEMU's resident memory with the guest idle.
//
// Run: go test -run '^$' -bench StartStopTestImage -benchtime 3x ./hostagent/qemu/
func BenchmarkStartStopTestImage(b *testing.B) {
	ctx := context.Background()
	d, spec := imageDriver(b)
	cleanupVM(b, d, spec.ID)
	var startTotal, stopTotal, rawTotal time.Duration
	var rssTotal float64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		obs, err := d.Start(ctx, spec)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := waitHealthy(ctx, d, spec, 120*time.Second); err != nil {
			b.Fatal(err)
		}
		startTotal += time.Since(t0)
		b.StopTimer()
		time.Sleep(3 * time.Second) // let the guest settle to idle
		rssTotal += rssMiB(b, obs.PID)
		b.StartTimer()
		stopTotal += benchStop(ctx, b, d, spec, i)
		b.StopTimer()
		rawTotal += bootToProof(b, d, spec)
		b.StartTimer()
	}
	n := float64(b.N)
	b.ReportMetric(startTotal.Seconds()/n, "start-to-health-s")
	b.ReportMetric(rawTotal.Seconds()/n, "boot-to-proof-s")
	b.ReportMetric(startTotal.Seconds()/rawTotal.Seconds(), "start-to-health/boot-to-proof")
	b.ReportMetric(stopTotal.Seconds()/n, "stop-s")
	b.ReportMetric(rssTotal/n, "idle-rss-MiB")
}

// bootToProof boots the spec's images with QEMU alone and returns the time
// from QEMU's spawn until the guest answers GET /v1/proof with the token's
// proof. It is the measurement of guest/image/testimage's
// BenchmarkBootToProof, which lives in that package's test code and cannot be
// imported: a fresh overlay and seed, then GET /v1/proof with a fresh nonce
// every 100 ms, each with a 2 s timeout. The argv is this package's
// (qemuArgs, on the machine the driver would build), so the two figures
// differ only by what the driver and the health call add.
func bootToProof(b *testing.B, d *Driver, spec driver.Spec) time.Duration {
	b.Helper()
	id := home.VMID{Namespace: "default", Name: "raw-boot"}
	vm := d.home.VM(id)
	if err := os.RemoveAll(vm.Dir); err != nil {
		b.Fatal(err)
	}
	if err := os.MkdirAll(vm.Dir, home.PrivateDirMode); err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(vm.Dir)
	golden, err := images.Get(d.home, home.Golden, spec.GoldenImage)
	if err != nil {
		b.Fatal(err)
	}
	if out, err := exec.Command(d.bin.Img, "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", golden.File, vm.Disk()).CombinedOutput(); err != nil {
		b.Fatalf("qemu-img create: %v: %s", err, out)
	}
	if _, err := writeSeed(vm.Seed(), id, protocol.GuestConfig{DotID: id.Namespace + "/" + id.Name, Token: spec.Token, Hostname: id.Name}, protocol.EngineEnv{}); err != nil {
		b.Fatal(err)
	}
	m, err := d.machineFor(vm, spec.CPUs, spec.MemoryMiB, spec.GoldenImage, spec.RuntimeImage)
	if err != nil {
		b.Fatal(err)
	}
	if m.GuestPort, err = freePort(); err != nil {
		b.Fatal(err)
	}
	args := qemuArgs(m)
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env, cmd.Dir = allowlistedEnvironment(os.Environ()), d.home.Root
	var qlog bytes.Buffer
	cmd.Stdout, cmd.Stderr = &qlog, &qlog
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	defer func() {
		cmd.Process.Kill()
		<-exited
	}()
	if err := waitProof(m.GuestPort, spec.Token, exited, 4*time.Minute); err != nil {
		b.Fatalf("raw boot: %v\nqemu: %s\nserial: %s", err, qlog.String(), tail(vm.SerialLog(), 4096))
	}
	return time.Since(t0)
}

// waitProof asks GET /v1/proof every 100 ms until the answer proves the
// token, QEMU exits, or the timeout passes.
func waitProof(port int, token string, exited <-chan struct{}, timeout time.Duration) error {
	cl := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(timeout)
	for {
		raw := make([]byte, protocol.ProofNonceBytes)
		rand.Read(raw)
		nonce := hex.EncodeToString(raw)
		resp, err := cl.Get(fmt.Sprintf("http://127.0.0.1:%d%s?%s=%s", port, protocol.PathProof, protocol.QueryNonce, nonce))
		if err == nil {
			var p protocol.ProofResponse
			decodeErr := json.NewDecoder(resp.Body).Decode(&p)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				if decodeErr != nil || !protocol.ProofMatches(token, nonce, p.Proof) {
					return errors.New("the guest answered a proof that does not match its token")
				}
				return nil
			}
		}
		select {
		case <-exited:
			return errors.New("qemu exited before the guest answered the proof")
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the guest did not answer the proof within %s", timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// BenchmarkStartBlank measures the host side of a start alone (tcg, no
// guest): Start, which provisions the overlay on the first start, writes the
// seed, spawns QEMU, writes its record, and returns without waiting for QEMU.
// Untimed: QEMU's resident memory once it listens on the guest port, and a
// kill.
//
// Run: go test -run '^$' -bench StartBlank -benchtime 5x ./hostagent/qemu/
func BenchmarkStartBlank(b *testing.B) {
	ctx := context.Background()
	d := realDriver(b)
	spec := blankSpec(testID)
	cleanupVM(b, d, spec.ID)
	var rssTotal float64
	for i := 0; i < b.N; i++ {
		obs, err := d.Start(ctx, spec)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		waitListening(b, obs.GuestPort)
		rssTotal += rssMiB(b, obs.PID)
		// No token: no poweroff is asked, QEMU is killed at once.
		if _, err := stopVM(ctx, d, spec.ID, "", blankGrace); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(rssTotal/float64(b.N), "rss-MiB")
}

// rssMiB reads VmRSS of a process.
func rssMiB(b *testing.B, pid int) float64 {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	b.Fatalf("no VmRSS for pid %d", pid)
	return 0
}

// benchStop stops the benchmark's VM as the controllers do and returns how
// long it took, noting an iteration whose guest did not power itself off.
func benchStop(ctx context.Context, b *testing.B, d *Driver, spec driver.Spec, i int) time.Duration {
	t0 := time.Now()
	res, err := stopVM(ctx, d, spec.ID, spec.Token, imageGrace)
	if err != nil {
		b.Fatal(err)
	}
	if !res.PoweredOff {
		b.Logf("iteration %d: the guest did not power itself off (%+v)", i, res)
	}
	return time.Since(t0)
}
