package e2e

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/hostagent/guestendpoint"
	"github.com/invisible-dots/invisible-dots/hostagent/hostconfig"
	"github.com/invisible-dots/invisible-dots/hostagent/qemu"
	"github.com/invisible-dots/invisible-dots/internal/home"
)

// vmHome makes a home with the test image registered and tcg set (see
// computer_test.go), for a server or an agent that boots VMs.
func vmHome(t testing.TB) home.Layout {
	t.Helper()
	h, err := home.New(newHome(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Ensure(); err != nil {
		t.Fatal(err)
	}
	// INVISIBLE_DOTS_E2E_IMAGE_WORK keeps the image's work (the guest's
	// binaries built from this tree) apart from a shared _output.
	work := cmp.Or(os.Getenv("INVISIBLE_DOTS_E2E_IMAGE_WORK"), filepath.Join(repoRoot, "_output/test-image"))
	cvmRun(t, repoRoot, nil, "go", "run", "./hostagent/images/cmd/test-image", "--work", work, "--home", h.Root)
	if err := hostconfig.Save(h, hostconfig.Config{Accelerator: hostconfig.TCG}); err != nil {
		t.Fatal(err)
	}
	return h
}

// smallDot is a Dot with a small computer, pinned to host unless it is
// empty.
func smallDot(name, host string) string { return dotWithCPUs(name, host, 1) }

// dotWithCPUs is smallDot with cpus vCPUs.
func dotWithCPUs(name, host string, cpus int) string {
	m := fmt.Sprintf(`apiVersion: dots.invisible.dev/v1alpha1
kind: Dot
metadata:
  name: %s
  namespace: default
spec:
  model:
    id: z-ai/glm-5.3-flash
  computer:
    cpu: %d
    memory: 2Gi
    disk: 20Gi
`, name, cpus)
	if host != "" {
		m += "    host: " + host + "\n"
	}
	return m
}

func readyIs(c *dotsv1.Computer, status metav1.ConditionStatus, reason string) bool {
	r := meta.FindStatusCondition(c.Status.Conditions, dotsv1.ReadyCondition)
	return r != nil && r.Status == status && (reason == "" || r.Reason == reason)
}

// TestTwoHosts: the server's own host and a second host agent, joined with
// `host join` and run as its own process in its own home, each run only
// the VMs pinned to them; the second agent's credential is its own; a
// killed agent's Computers turn Unknown and come back with the same QEMU
// when it returns.
func TestTwoHosts(t *testing.T) {
	if testing.Short() {
		t.Skip("boots VMs under QEMU")
	}
	if _, err := qemu.FindBinaries(os.Getenv); err != nil {
		t.Skipf("QEMU is not installed (invisible-dots setup installs it): %v", err)
	}
	a, b := vmHome(t), vmHome(t)
	vmA := a.VM(home.VMID{Namespace: "default", Name: "on-a"})
	vmB := b.VM(home.VMID{Namespace: "default", Name: "on-b"})
	t.Cleanup(func() { cvmKillRecorded(vmA); cvmKillRecorded(vmB) })

	// The web client with people's sign-in, on the loopback the guests
	// reach (which sign-in allows): the second host's Dot is read through
	// it as the first's.
	webAddr := freeAddress(t)
	srv := launch(t, a.Root, []string{"server", "--web-sign-in"}, "INVISIBLE_DOTS_HOST=host-a", "INVISIBLE_DOTS_WEB_LISTEN="+webAddr)
	srv.waitReady()
	k := cvmKubectl{t: t, s: srv}

	t.Log("host join prints a kubeconfig of the second host's own")
	agentKubeconfig := filepath.Join(t.TempDir(), "host-b.kubeconfig")
	cvmRun(t, repoRoot, []string{"INVISIBLE_DOTS_HOME=" + a.Root}, binary, "host", "join", "--name", "host-b", "--output", agentKubeconfig)
	if st, err := os.Stat(agentKubeconfig); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("the agent's kubeconfig: %v, mode %v; want 0600", err, st.Mode().Perm())
	}
	startAgent := func() *server {
		ag := launch(t, b.Root, []string{"agent", "--kubeconfig", agentKubeconfig, "--host", "host-b"})
		eventually(t, time.Minute, "host-b registered and Ready", func() error {
			out, err := k.try("get", "host", "host-b", "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
			if err != nil || strings.TrimSpace(out) != "True" {
				return fmt.Errorf("Ready=%q (%v); agent log:\n%s", out, err, ag.logTail(10))
			}
			return nil
		})
		return ag
	}
	ag := startAgent()
	t.Log(k.run("get", "hosts", "-o", "wide"))

	t.Log("a Dot pinned to each host: each agent starts only its own QEMU")
	k.apply(smallDot("on-a", "host-a"))
	k.apply(smallDot("on-b", "host-b"))
	ca := k.waitComputer("on-a", vmReadyTimeout, runningReady)
	cb := k.waitComputer("on-b", vmReadyTimeout, runningReady)
	if ca.Spec.NodeName != "host-a" || cb.Spec.NodeName != "host-b" {
		t.Fatalf("nodeName %q and %q; want host-a and host-b", ca.Spec.NodeName, cb.Spec.NodeName)
	}
	if cvmCountQEMU(vmA) != 1 || cvmCountQEMU(vmB) != 1 {
		t.Fatalf("QEMU of on-a: %d, of on-b: %d; want one each", cvmCountQEMU(vmA), cvmCountQEMU(vmB))
	}
	if _, err := os.Stat(vmB.Disk()); err != nil {
		t.Errorf("on-b's disk is not in host-b's home: %v", err)
	}
	if _, err := os.Stat(a.VM(home.VMID{Namespace: "default", Name: "on-b"}).Dir); err == nil {
		t.Errorf("on-b has a directory in host-a's home")
	}

	t.Log("the second agent's credential: its Computers, its own guests' Secrets by name, not Dots, not other namespaces' Secrets")
	srv.mustKubectl("create", "namespace", "elsewhere")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"get", "computers", "-n", "default"}, "yes"},
		// Its own guests' Secrets by name (the node authorizer's rule):
		// not every Secret of the namespace, not host-a's guest's token.
		{[]string{"get", "secrets", "-n", "default"}, "no"},
		{[]string{"list", "secrets", "-n", "default"}, "no"},
		{[]string{"get", "secret/" + dotsv1.GuestTokenSecretName("on-b"), "-n", "default"}, "yes"},
		{[]string{"get", "secret/" + dotsv1.GuestTokenSecretName("on-a"), "-n", "default"}, "no"},
		{[]string{"get", "secrets", "-n", "elsewhere"}, "no"},
		{[]string{"get", "secrets", "-n", dotsv1.SystemNamespace}, "no"},
		// The default OpenRouter key, by name, and no other Secret there.
		{[]string{"get", "secret/" + dotsv1.DefaultKeySecretName, "-n", dotsv1.SystemNamespace}, "yes"},
		{[]string{"get", "secret/" + dotsv1.DefaultKeySecretName, "-n", "elsewhere"}, "no"},
		{[]string{"get", "secret/host-b-token", "-n", dotsv1.SystemNamespace}, "no"},
		// The guest link reads Dots and writes only their status.
		{[]string{"watch", "dots", "-n", "default"}, "yes"},
		{[]string{"patch", "dots", "--subresource=status", "-n", "default"}, "yes"},
		{[]string{"create", "dots", "-n", "default"}, "no"},
		{[]string{"patch", "dots", "-n", "default"}, "no"},
		{[]string{"delete", "hosts"}, "no"},
	} {
		out, _ := runKubectl(agentKubeconfig, append([]string{"auth", "can-i"}, c.args...)...)
		// The answer is the last line (kubectl may warn before it).
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if got := strings.TrimSpace(lines[len(lines)-1]); got != c.want {
			t.Errorf("host-b: kubectl auth can-i %s = %q; want %s", strings.Join(c.args, " "), got, c.want)
		}
	}

	t.Log("each Dot's files through the Dots API: the second host's through its own agent's endpoint")
	files := func(dot string) (string, error) {
		cmd := exec.Command(binary, "files", "ls", dot)
		cmd.Env = append(os.Environ(), "INVISIBLE_DOTS_HOME="+a.Root, "KUBECONFIG="+srv.kubeconfig())
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	for _, dot := range []string{"on-a", "on-b"} {
		eventually(t, time.Minute, dot+"'s files listed", func() error {
			if out, err := files(dot); err != nil {
				return fmt.Errorf("files ls %s: %v\n%s", dot, err, out)
			}
			return nil
		})
	}
	t.Log("and through the web client, signed in: the second host's Dot answers as the first's")
	web := signInToWeb(t, "http://"+webAddr, a.APIToken())
	for _, dot := range []string{"on-a", "on-b"} {
		base := "/dots/v1/namespaces/default/dots/" + dot
		if status, body := web.get(t, base+"/files/list"); status != http.StatusOK {
			t.Errorf("web client: %s's files: %d %s", dot, status, body)
		}
		// The test image has no desktop and may have no engine: the
		// guest's own answer, whatever it is, shows the path reached it.
		for _, route := range []string{"/screenshot", "/tools"} {
			if status, body := web.get(t, base+route); status == http.StatusBadGateway || strings.Contains(body, "host_unreachable") {
				t.Errorf("web client: %s%s did not reach the guest: %d %s", dot, route, status, body)
			}
		}
	}
	hostB := &dotsv1.Host{}
	if err := json.Unmarshal([]byte(k.run("get", "host", "host-b", "-o", "json")), hostB); err != nil {
		t.Fatal(err)
	}
	if ep := hostB.Status.GuestEndpoint; ep == nil {
		t.Errorf("host-b publishes no guest endpoint")
	} else {
		// Anyone but the control plane is refused, before any guest is asked.
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: guestendpoint.PinnedTLS(ep.CertificateSHA256)}, Timeout: 10 * time.Second}
		for _, token := range []string{"", "forged"} {
			req, _ := http.NewRequest(http.MethodGet, ep.URL+guestendpoint.PathPrefix+"default/on-b/v1/files/list", nil)
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			resp, err := c.Do(req)
			if err != nil {
				t.Errorf("a request to host-b's endpoint with token %q: %v", token, err)
				continue
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("a request to host-b's endpoint with token %q: %d; want 401", token, resp.StatusCode)
			}
		}
	}

	t.Log("kill -9 of the second agent: its Computer turns Unknown, its VM keeps running, host-a's is untouched")
	pidB := int(cb.Status.PID)
	ag.kill9()
	killed := time.Now()
	k.waitComputer("on-b", 90*time.Second, func(c *dotsv1.Computer) bool {
		return readyIs(c, metav1.ConditionUnknown, dotsv1.HostUnreachableReason)
	})
	t.Logf("FIGURE agent killed to Computer Unknown: %s", time.Since(killed).Round(time.Second))
	if !cvmAlive(pidB) {
		t.Fatalf("on-b's QEMU pid %d died with its agent", pidB)
	}
	if got := k.getComputer("on-a"); !readyIs(got, metav1.ConditionTrue, "") {
		t.Errorf("on-a after host-b's agent died: %+v; want Ready", got.Status.Conditions)
	}
	dot := &dotsv1.Dot{}
	if err := json.Unmarshal([]byte(k.run("get", "dot", "on-b", "-o", "json")), dot); err != nil {
		t.Fatal(err)
	}
	if r := meta.FindStatusCondition(dot.Status.Conditions, dotsv1.ReadyCondition); r == nil || r.Reason != dotsv1.HostUnreachableReason {
		t.Errorf("Dot on-b's Ready: %+v; want reason %s", r, dotsv1.HostUnreachableReason)
	}
	if out, err := files("on-b"); err == nil || !strings.Contains(out, "host_unreachable") || !strings.Contains(out, "host-b") {
		t.Errorf("files ls on-b with its agent killed: %v\n%s\nwant host_unreachable naming host-b", err, out)
	}
	if status, body := web.get(t, "/dots/v1/namespaces/default/dots/on-b/files/list"); status != http.StatusBadGateway || !strings.Contains(body, "host_unreachable") || !strings.Contains(body, "host-b") {
		t.Errorf("web client: on-b's files with its agent killed: %d %s; want 502 host_unreachable naming host-b", status, body)
	}

	t.Log("the agent comes back: it adopts its VM (same pid) and Ready returns")
	startAgent()
	cb = k.waitComputer("on-b", 2*time.Minute, runningReady)
	if int(cb.Status.PID) != pidB || cvmCountQEMU(vmB) != 1 {
		t.Errorf("after the agent's return: pid %d (was %d), %d QEMU; want the same one, alone", cb.Status.PID, pidB, cvmCountQEMU(vmB))
	}

	t.Log("deleting the Dots removes each VM from its own host")
	k.run("delete", "dot", "on-a", "on-b", "--wait=true", "--timeout=120s")
	for _, vm := range []home.VM{vmA, vmB} {
		if _, err := os.Stat(vm.Dir); err == nil {
			t.Errorf("%s is still there after its Dot was deleted", vm.Dir)
		}
	}
}

// TestLeaderElection: two servers run their controllers with --kubeconfig
// against the API of a third that serves the API alone; one leads at a
// time, and when the leader is killed the other takes over within the
// Lease's duration.
func TestLeaderElection(t *testing.T) {
	api := launch(t, newHome(t), []string{"server", "--no-web", "--no-controllers"})
	api.waitReady()
	var standbys []*server
	for i := range 2 {
		s := launch(t, newHome(t), []string{"server", "--no-web", "--kubeconfig", api.kubeconfig()}, fmt.Sprintf("INVISIBLE_DOTS_HOST=standby-%d", i))
		standbys = append(standbys, s)
	}
	leads := func(s *server) bool { return strings.Contains(s.logTail(1000), "central controllers lead") }
	leaders := func() []*server {
		var out []*server
		for _, s := range standbys {
			if leads(s) {
				out = append(out, s)
			}
		}
		return out
	}
	eventually(t, 2*time.Minute, "one server leads", func() error {
		if n := len(leaders()); n != 1 {
			return fmt.Errorf("%d lead", n)
		}
		return nil
	})
	leader := leaders()[0]
	time.Sleep(5 * time.Second)
	if n := len(leaders()); n != 1 {
		t.Fatalf("%d servers lead at once", n)
	}
	t.Log("only the leader acts: a Dot's Computer is made once")
	api.mustKubectl("apply", "-f", "config/samples/dots_v1alpha1_dot.yaml")
	eventually(t, time.Minute, "the sample Dot's Computer", func() error {
		_, err := api.kubectl("get", "computer", "fare-watch")
		return err
	})

	t.Log("kill -9 of the leader: the other takes over within the Lease's duration")
	killed := time.Now()
	leader.kill9()
	eventually(t, 45*time.Second, "the other server leads", func() error {
		for _, s := range standbys {
			if s != leader && leads(s) {
				return nil
			}
		}
		return fmt.Errorf("none yet")
	})
	t.Logf("FIGURE leader killed to hand-over: %s (Lease of 15 s)", time.Since(killed).Round(time.Second))
	api.mustKubectl("delete", "dot", "fare-watch", "--wait=true", "--timeout=60s")
}

// runKubectl runs the real kubectl with a kubeconfig and returns its
// combined output.
func runKubectl(kubeconfig string, args ...string) (string, error) {
	cmd := exec.Command("kubectl", append([]string{"--kubeconfig", kubeconfig}, args...)...)
	cmd.Dir = repoRoot
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// webSession is a person signed in to the web client.
type webSession struct {
	base string
	c    *http.Client
}

// signInToWeb signs in to the web client at base with the token in
// tokenFile's first line (the admin's, here).
func signInToWeb(t *testing.T, base, tokenFile string) *webSession {
	t.Helper()
	data, err := os.ReadFile(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	token := strings.TrimSpace(strings.SplitN(string(data), "\n", 2)[0])
	jar, _ := cookiejar.New(nil)
	w := &webSession{base: base, c: &http.Client{Jar: jar, Timeout: 60 * time.Second}}
	body, _ := json.Marshal(map[string]string{"token": token})
	resp, err := w.c.Post(base+"/web/v1/session", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("sign in to the web client: %d", resp.StatusCode)
	}
	return w
}

func (w *webSession) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := w.c.Get(w.base + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, string(b)
}
