package integration

import (
	"context"
	"math"
	"net/http"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/hostagent/doctor"
	"github.com/invisible-dots/invisible-dots/hostagent/driver/fake"
	guestfake "github.com/invisible-dots/invisible-dots/hostagent/guestclient/fakeguest"
	"github.com/invisible-dots/invisible-dots/hostagent/guestendpoint"
	dotsclient "github.com/invisible-dots/invisible-dots/internal/dotsapi/client"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
	"github.com/invisible-dots/invisible-dots/internal/hostidentity"
	"github.com/invisible-dots/invisible-dots/internal/keystore"
)

var _ = Describe("The guest routes of the Dots API", Ordered, func() {
	var (
		cs             kubernetes.Interface
		ns             string
		dot            *dotsv1.Dot
		editor, viewer *dotsclient.Client
		// port and pid name the Dot's guest in the fake engine.
		port, pid int
	)

	BeforeAll(func() {
		var err error
		cs, err = kubernetes.NewForConfig(cp.Config)
		Expect(err).NotTo(HaveOccurred())
		ns = newNamespace("guest")
		dot = validDot()
		dot.Namespace = ns
		// On the suite's agent, the one that runs in the server's process.
		dot.Spec.Computer.Host = fakeHostName
		dot.Spec.MCPServers = []dotsv1.MCPServer{{Name: "time", Command: "time-mcp", Secrets: []string{"TIME_API_KEY"}}}
		Expect(k8sClient.Create(suiteCtx, dot)).To(Succeed())
		DeferCleanup(func() { _ = k8sClient.Delete(context.Background(), dot) })
		_, err = keystore.StoreForDot(suiteCtx, k8sClient, client.ObjectKeyFromObject(dot), "sk-or-guest-routes")
		Expect(err).NotTo(HaveOccurred())
		Eventually(func(g Gomega) {
			d := &dotsv1.Dot{}
			g.Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(dot), d)).To(Succeed())
			readyWithGuest(g, d)
		}).Should(Succeed())
		c, err := getComputer(dot)
		Expect(err).NotTo(HaveOccurred())
		port, pid = int(c.Status.GuestPort), int(c.Status.PID)
		editor = personWithRole(cs, ns, "eddie", "dots-editor")
		viewer = personWithRole(cs, ns, "vera", "dots-viewer")
	})

	It("lists and reads the Dot's home through its host agent, and refuses a path outside it", func() {
		fakeEngine.WriteFile(port, pid, "/home/dot/notes/plan.md", []byte("# the plan\n"))
		fakeEngine.WriteFile(port, pid, "/home/dot/notes/page.html", []byte("<script>alert(1)</script>"))
		fakeEngine.WriteFile(port, pid, "/home/dot/big.bin", make([]byte, wire.MaxFileBytes+1))

		home, err := viewer.ListFiles(suiteCtx, ns, dot.Name, "")
		Expect(err).NotTo(HaveOccurred())
		Expect(home.Path).To(Equal("/home/dot"))
		Expect(home.Entries).To(ConsistOf(
			HaveField("Name", "big.bin"),
			And(HaveField("Name", "notes"), HaveField("Type", protocol.EntryDir)),
		))
		notes, err := viewer.ListFiles(suiteCtx, ns, dot.Name, "~/notes")
		Expect(err).NotTo(HaveOccurred())
		Expect(notes.Entries).To(HaveLen(2))

		plan, err := viewer.ReadFile(suiteCtx, ns, dot.Name, "notes/plan.md")
		Expect(err).NotTo(HaveOccurred())
		Expect(string(plan.Data)).To(Equal("# the plan\n"))
		Expect(plan.ContentType).To(Equal("text/plain; charset=utf-8"))
		Expect(plan.CSP).To(Equal(wire.FileCSP))
		page, err := editor.ReadFile(suiteCtx, ns, dot.Name, "/home/dot/notes/page.html")
		Expect(err).NotTo(HaveOccurred())
		Expect(page.ContentType).To(Equal("text/plain; charset=utf-8"), "markup the Dot wrote is never served as markup")

		_, err = viewer.ReadFile(suiteCtx, ns, dot.Name, "big.bin")
		expectRefused(err, http.StatusRequestEntityTooLarge, wire.CodeFileTooLarge)
		_, err = viewer.ReadFile(suiteCtx, ns, dot.Name, "/etc/passwd")
		expectRefused(err, http.StatusBadRequest, wire.CodeInvalidPath)
		_, err = viewer.ListFiles(suiteCtx, ns, dot.Name, "notes/../../root")
		expectRefused(err, http.StatusBadRequest, wire.CodeInvalidPath)
		_, err = viewer.ReadFile(suiteCtx, ns, dot.Name, "missing.txt")
		expectRefused(err, http.StatusNotFound, protocol.ErrNotFound)
		_, err = viewer.ReadFile(suiteCtx, ns, dot.Name, "notes")
		expectRefused(err, http.StatusBadRequest, protocol.ErrIsDirectory)

		// Someone with no role in the namespace reads nothing of it.
		other := personWithRole(cs, newNamespace("guest-other"), "olga", "dots-editor")
		_, err = other.ListFiles(suiteCtx, ns, dot.Name, "")
		expectRefused(err, http.StatusForbidden, wire.CodeForbidden)
	})

	It("serves the screen as a PNG, and the engine's tools and skills", func() {
		png, err := viewer.Screenshot(suiteCtx, ns, dot.Name)
		Expect(err).NotTo(HaveOccurred())
		Expect(png).To(Equal(guestfake.FakePNG))
		tools, err := viewer.Tools(suiteCtx, ns, dot.Name)
		Expect(err).NotTo(HaveOccurred())
		Expect(tools.Tools).To(ContainElement(HaveField("Name", "exec")))
		Expect(tools.MCPServers).To(ConsistOf(And(HaveField("Name", "time"), HaveField("State", protocol.MCPFailed))))
		skills, err := viewer.Skills(suiteCtx, ns, dot.Name)
		Expect(err).NotTo(HaveOccurred())
		Expect(skills.Skills).To(BeEmpty())
	})

	It("stores an MCP secret for an editor alone, and the running guest has it at once, not at the next poll", func() {
		list, err := viewer.MCPSecrets(suiteCtx, ns, dot.Name)
		Expect(err).NotTo(HaveOccurred())
		Expect(list.Secrets).To(Equal([]wire.MCPSecret{{Server: "time", Name: "TIME_API_KEY", Set: false}}))

		_, err = viewer.SetMCPSecret(suiteCtx, ns, dot.Name, "time", "TIME_API_KEY", "Bearer t-1")
		expectRefused(err, http.StatusForbidden, wire.CodeForbidden)
		_, err = editor.SetMCPSecret(suiteCtx, ns, dot.Name, "time", "UNNAMED", "x")
		expectRefused(err, http.StatusNotFound, wire.CodeNotFound)
		_, err = editor.SetMCPSecret(suiteCtx, ns, dot.Name, "time", "TIME_API_KEY", "line\nbreak")
		expectRefused(err, http.StatusBadRequest, wire.CodeInvalidRequest)
		Expect(err.Error()).NotTo(ContainSubstring("line\nbreak"))

		start := time.Now()
		_, err = editor.SetMCPSecret(suiteCtx, ns, dot.Name, "time", "TIME_API_KEY", "Bearer t-1")
		Expect(err).NotTo(HaveOccurred())
		// The guest link polls a Ready Dot's Secrets every 30 s; the
		// annotation the write leaves on the Dot is heard at once.
		Eventually(func() string { return fakeEngine.MCPSecrets(port, pid)["time"]["TIME_API_KEY"] }).
			WithTimeout(10 * time.Second).WithPolling(10 * time.Millisecond).Should(Equal("Bearer t-1"))
		GinkgoWriter.Printf("an MCP secret reached the running guest %s after the PUT\n", time.Since(start).Round(time.Millisecond))
		tools, err := viewer.Tools(suiteCtx, ns, dot.Name)
		Expect(err).NotTo(HaveOccurred())
		Expect(tools.MCPServers).To(ConsistOf(And(HaveField("Name", "time"), HaveField("State", protocol.MCPConnected))))
		list, err = viewer.MCPSecrets(suiteCtx, ns, dot.Name)
		Expect(err).NotTo(HaveOccurred())
		Expect(list.Secrets).To(Equal([]wire.MCPSecret{{Server: "time", Name: "TIME_API_KEY", Set: true}}))

		expectRefused(viewer.ClearMCPSecret(suiteCtx, ns, dot.Name, "time", "TIME_API_KEY"), http.StatusForbidden, wire.CodeForbidden)
		Expect(editor.ClearMCPSecret(suiteCtx, ns, dot.Name, "time", "TIME_API_KEY")).To(Succeed())
		Eventually(func() map[string]string { return fakeEngine.MCPSecrets(port, pid)["time"] }).
			WithTimeout(10 * time.Second).WithPolling(10 * time.Millisecond).Should(BeEmpty())
	})

	It("sums the spend the guest reported, from the event log", func() {
		fakeEngine.Stream(port, pid).Append(
			protocol.OutboundEvent{Type: protocol.EventMessageAssistant, Data: []byte(`{"text":"one","spent_usd":0.02}`)},
			protocol.OutboundEvent{Type: protocol.EventMessageAssistant, Data: []byte(`{"text":"two","spent_usd":0.03}`)},
		)
		Eventually(func(g Gomega) {
			u, err := viewer.Usage(suiteCtx, ns, dot.Name, wire.UsageQuery{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(math.Abs(u.SpentUSD - 0.05)).To(BeNumerically("<", 1e-9))
		}).Should(Succeed())
		future := time.Now().Add(time.Hour)
		u, err := viewer.Usage(suiteCtx, ns, dot.Name, wire.UsageQuery{Since: &future})
		Expect(err).NotTo(HaveOccurred())
		Expect(u.SpentUSD).To(BeZero())
	})

	It("answers the server's health to everyone, and the doctor to administrators and dots-doctor alone", func() {
		h, err := viewer.Health(suiteCtx)
		Expect(err).NotTo(HaveOccurred())
		Expect(h.Status).To(Equal(wire.StatusOK))
		Expect(h.Database).To(Equal(wire.StatusOK))
		Expect(h.Home).To(Equal(cp.Home.Root))
		Expect(h.DatabaseKind).To(BeElementOf(wire.DatabaseManaged, wire.DatabaseExternal))

		_, err = viewer.Doctor(suiteCtx)
		expectRefused(err, http.StatusForbidden, "")
		admin, err := dotsclient.New(cp.Config)
		Expect(err).NotTo(HaveOccurred())
		rep, err := admin.Doctor(suiteCtx)
		Expect(err).NotTo(HaveOccurred())
		Expect(rep.Checks).NotTo(BeEmpty())
		Expect(rep.Checks[0].Name).To(Equal(doctor.RowQEMU))
		_, hasKeyRow := rep.Row(doctor.RowOpenRouterKey)
		Expect(hasKeyRow).To(BeTrue(), "the key row, asked of the API server in process: %+v", rep.Checks)

		_, err = cs.RbacV1().ClusterRoleBindings().Create(suiteCtx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "vera-doctor-" + rand.String(4)},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "dots-doctor"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "vera", Namespace: ns}},
		}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		Eventually(func() error { _, err := viewer.Doctor(suiteCtx); return err }).Should(Succeed())
	})

	It("reaches a computer on a second host through that host's agent, and names the host once its agent is gone", func() {
		b := &secondHost{name: "guest-far-" + rand.String(4), host: fake.NewHost(), guest: fakeEngine.Guest()}
		b.start()
		stopped := false
		DeferCleanup(func() {
			if !stopped {
				b.stop()
			}
			_ = k8sClient.Delete(context.Background(), &dotsv1.Host{ObjectMeta: metav1.ObjectMeta{Name: b.name}})
		})
		far := validDot()
		far.Namespace = ns
		far.Spec.Computer.Host = b.name
		Expect(k8sClient.Create(suiteCtx, far)).To(Succeed())
		DeferCleanup(func() { _ = k8sClient.Delete(context.Background(), far) })
		var c *dotsv1.Computer
		Eventually(func(g Gomega) {
			var err error
			c, err = getComputer(far)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(c.Spec.NodeName).To(Equal(b.name))
			g.Expect(c.Status.State).To(Equal(dotsv1.ComputerRunning))
		}).Should(Succeed())
		host := &dotsv1.Host{}
		Expect(k8sClient.Get(suiteCtx, client.ObjectKey{Name: b.name}, host)).To(Succeed())
		Expect(host.Status.GuestEndpoint).NotTo(BeNil(), "the agent publishes its guest endpoint on its Host")
		fakeEngine.WriteFile(int(c.Status.GuestPort), int(c.Status.PID), "/home/dot/far.txt", []byte("from the second host\n"))
		Eventually(func(g Gomega) {
			f, err := viewer.ReadFile(suiteCtx, ns, far.Name, "far.txt")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(string(f.Data)).To(Equal("from the second host\n"))
		}).Should(Succeed())

		b.stop()
		stopped = true
		_, err := viewer.ListFiles(suiteCtx, ns, far.Name, "")
		expectRefused(err, http.StatusBadGateway, wire.CodeHostUnreachable)
		Expect(err.Error()).To(ContainSubstring("runs on host " + b.name + ", whose agent cannot be reached"))
		// The log is the control plane's: the spend is read all the same.
		_, err = viewer.Usage(suiteCtx, ns, far.Name, wire.UsageQuery{})
		Expect(err).NotTo(HaveOccurred())
	})

	It("refuses a request to a host agent's guest endpoint from anyone but the control plane", func() {
		host := &dotsv1.Host{}
		Expect(k8sClient.Get(suiteCtx, client.ObjectKey{Name: fakeHostName}, host)).To(Succeed())
		ep := host.Status.GuestEndpoint
		Expect(ep).NotTo(BeNil())
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: guestendpoint.PinnedTLS(ep.CertificateSHA256)}}
		url := ep.URL + guestendpoint.PathPrefix + ns + "/" + dot.Name + "/v1/files/list?path=%2Fhome%2Fdot"
		ask := func(token string) int {
			req, err := http.NewRequest(http.MethodGet, url, nil)
			Expect(err).NotTo(HaveOccurred())
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			resp, err := c.Do(req)
			Expect(err).NotTo(HaveOccurred())
			resp.Body.Close()
			return resp.StatusCode
		}
		Expect(ask("")).To(Equal(http.StatusUnauthorized), "no token")
		Expect(ask("forged-token")).To(Equal(http.StatusUnauthorized), "a token the API server does not vouch for")
		// A person's own token (for the API server's audience) is not the
		// control plane's, and a token of the person for the endpoint's
		// audience is not the control plane's identity.
		tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(suiteCtx, "vera", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(ask(tr.Status.Token)).To(Equal(http.StatusUnauthorized), "a token for the API server's audience")
		tr, err = cs.CoreV1().ServiceAccounts(ns).CreateToken(suiteCtx, "vera", &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{Audiences: []string{guestendpoint.Audience}}}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(ask(tr.Status.Token)).To(Equal(http.StatusForbidden), "a person's token for the endpoint's audience")
		// The control plane's own token is served.
		tr, err = cs.CoreV1().ServiceAccounts(dotsv1.SystemNamespace).CreateToken(suiteCtx, hostidentity.GuestProxyServiceAccount, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{Audiences: []string{guestendpoint.Audience}}}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(ask(tr.Status.Token)).To(Equal(http.StatusOK))
	})

	It("answers computer_stopped once the Dot's computer is stopped", func() {
		c, err := getComputer(dot)
		Expect(err).NotTo(HaveOccurred())
		Expect(k8sClient.Patch(suiteCtx, c, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"runStrategy":"Halted"}}`)))).To(Succeed())
		eventuallyComputer(c, stoppedFor(dotsv1.StopUser))
		for _, call := range []func() error{
			func() error { _, err := viewer.ListFiles(suiteCtx, ns, dot.Name, ""); return err },
			func() error { _, err := viewer.Screenshot(suiteCtx, ns, dot.Name); return err },
			func() error { _, err := viewer.Tools(suiteCtx, ns, dot.Name); return err },
		} {
			err := call()
			expectRefused(err, http.StatusConflict, wire.CodeComputerStopped)
			Expect(strings.Contains(err.Error(), "STOPPED")).To(BeTrue(), "%v", err)
		}
		// Its MCP secrets are stored while it sleeps, and pushed at its start.
		_, err = editor.SetMCPSecret(suiteCtx, ns, dot.Name, "time", "TIME_API_KEY", "Bearer t-2")
		Expect(err).NotTo(HaveOccurred())
	})
})
