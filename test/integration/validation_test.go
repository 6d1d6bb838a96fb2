package integration

import (
	"fmt"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// validDot is a Dot that passes every rule; each entry changes one thing.
func validDot() *dotsv1.Dot {
	return &dotsv1.Dot{
		ObjectMeta: metav1.ObjectMeta{Name: "v-" + rand.String(8), Namespace: "default"},
		Spec: dotsv1.DotSpec{
			Model: dotsv1.ModelRef{ID: "z-ai/glm-5.3-flash"},
		},
	}
}

func gi(n int) *resource.Quantity { q := resource.MustParse(fmt.Sprintf("%dGi", n)); return &q }

// expectVerdict creates the Dot (server-side dry run, so nothing is kept)
// and checks that it is accepted, or refused with wantFragment in the error.
func expectVerdict(dot *dotsv1.Dot, wantFragment string) {
	GinkgoHelper()
	err := k8sClient.Create(suiteCtx, dot, &clientDryRun)
	if wantFragment == "" {
		Expect(err).NotTo(HaveOccurred())
		return
	}
	Expect(err).To(HaveOccurred(), "the Dot should have been refused")
	Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want 422 Invalid, got %v", err)
	Expect(err.Error()).To(ContainSubstring(wantFragment))
}

var _ = Describe("Dot validation", func() {
	b := protocol.Bounds
	DescribeTable("every bound, both sides",
		func(mutate func(*dotsv1.Dot), wantFragment string) {
			d := validDot()
			mutate(d)
			expectVerdict(d, wantFragment)
		},
		Entry("cpu at min", func(d *dotsv1.Dot) { d.Spec.Computer.CPU = int32(b.CPU.Min) }, ""),
		Entry("cpu below min", func(d *dotsv1.Dot) { d.Spec.Computer.CPU = -1 }, "spec.computer.cpu"),
		Entry("cpu at max", func(d *dotsv1.Dot) { d.Spec.Computer.CPU = int32(b.CPU.Max) }, ""),
		Entry("cpu above max", func(d *dotsv1.Dot) { d.Spec.Computer.CPU = int32(b.CPU.Max + 1) }, "spec.computer.cpu"),
		Entry("memory at min", func(d *dotsv1.Dot) { d.Spec.Computer.Memory = gi(b.MemoryGiB.Min) }, ""),
		Entry("memory below min", func(d *dotsv1.Dot) { d.Spec.Computer.Memory = ptr.To(resource.MustParse("2047Mi")) }, "memory must be between"),
		Entry("memory at max", func(d *dotsv1.Dot) { d.Spec.Computer.Memory = gi(b.MemoryGiB.Max) }, ""),
		Entry("memory above max", func(d *dotsv1.Dot) { d.Spec.Computer.Memory = gi(b.MemoryGiB.Max + 1) }, "memory must be between"),
		Entry("disk at min", func(d *dotsv1.Dot) { d.Spec.Computer.Disk = gi(b.DiskGiB.Min) }, ""),
		Entry("disk below min", func(d *dotsv1.Dot) { d.Spec.Computer.Disk = gi(b.DiskGiB.Min - 1) }, "disk must be between"),
		Entry("disk at max", func(d *dotsv1.Dot) { d.Spec.Computer.Disk = gi(b.DiskGiB.Max) }, ""),
		Entry("disk above max", func(d *dotsv1.Dot) { d.Spec.Computer.Disk = gi(b.DiskGiB.Max + 1) }, "disk must be between"),
		Entry("idleTimeout 0 (never)", func(d *dotsv1.Dot) { d.Spec.Computer.IdleTimeout = &metav1.Duration{} }, ""),
		Entry("idleTimeout negative", func(d *dotsv1.Dot) { d.Spec.Computer.IdleTimeout = &metav1.Duration{Duration: -1e9} }, "idleTimeout cannot be negative"),
		Entry("steps at min", func(d *dotsv1.Dot) { d.Spec.Limits.MaxStepsPerTask = int32(b.MaxStepsPerTask.Min) }, ""),
		Entry("steps below min", func(d *dotsv1.Dot) { d.Spec.Limits.MaxStepsPerTask = -5 }, "spec.limits.maxStepsPerTask"),
		Entry("steps at max", func(d *dotsv1.Dot) { d.Spec.Limits.MaxStepsPerTask = int32(b.MaxStepsPerTask.Max) }, ""),
		Entry("steps above max", func(d *dotsv1.Dot) { d.Spec.Limits.MaxStepsPerTask = int32(b.MaxStepsPerTask.Max + 1) }, "spec.limits.maxStepsPerTask"),
		Entry("cost at min", func(d *dotsv1.Dot) { d.Spec.Limits.MaxCostPerTaskUSD = b.MaxCostPerTaskUSD.Min }, ""),
		Entry("cost below min", func(d *dotsv1.Dot) { d.Spec.Limits.MaxCostPerTaskUSD = 0.009 }, "spec.limits.maxCostPerTaskUSD"),
		Entry("cost at max", func(d *dotsv1.Dot) { d.Spec.Limits.MaxCostPerTaskUSD = b.MaxCostPerTaskUSD.Max }, ""),
		Entry("cost above max", func(d *dotsv1.Dot) { d.Spec.Limits.MaxCostPerTaskUSD = b.MaxCostPerTaskUSD.Max + 0.01 }, "spec.limits.maxCostPerTaskUSD"),
		Entry("mcp timeout at min", func(d *dotsv1.Dot) {
			d.Spec.MCPServers = []dotsv1.MCPServer{{Name: "t", Command: "x", TimeoutSeconds: ptr.To(int32(b.MCPTimeoutS.Min))}}
		}, ""),
		Entry("mcp timeout below min", func(d *dotsv1.Dot) {
			d.Spec.MCPServers = []dotsv1.MCPServer{{Name: "t", Command: "x", TimeoutSeconds: ptr.To(int32(0))}}
		}, "timeoutSeconds"),
		Entry("mcp timeout at max", func(d *dotsv1.Dot) {
			d.Spec.MCPServers = []dotsv1.MCPServer{{Name: "t", Command: "x", TimeoutSeconds: ptr.To(int32(b.MCPTimeoutS.Max))}}
		}, ""),
		Entry("mcp timeout above max", func(d *dotsv1.Dot) {
			d.Spec.MCPServers = []dotsv1.MCPServer{{Name: "t", Command: "x", TimeoutSeconds: ptr.To(int32(b.MCPTimeoutS.Max + 1))}}
		}, "timeoutSeconds"),
		Entry("mcp startup timeout above max", func(d *dotsv1.Dot) {
			d.Spec.MCPServers = []dotsv1.MCPServer{{Name: "t", Command: "x", StartupTimeoutSeconds: ptr.To(int32(b.MCPStartupTimeoutS.Max + 1))}}
		}, "startupTimeoutSeconds"),
		Entry("mcp startup timeout at min", func(d *dotsv1.Dot) {
			d.Spec.MCPServers = []dotsv1.MCPServer{{Name: "t", Command: "x", StartupTimeoutSeconds: ptr.To(int32(b.MCPStartupTimeoutS.Min))}}
		}, ""),
	)

	DescribeTable("names, permissions, roles and MCP servers",
		func(mutate func(*dotsv1.Dot), wantFragment string) {
			d := validDot()
			mutate(d)
			expectVerdict(d, wantFragment)
		},
		Entry("a 40-character name", func(d *dotsv1.Dot) { d.Name = "a234567890123456789012345678901234567890" }, ""),
		Entry("a 41-character name", func(d *dotsv1.Dot) { d.Name = "a2345678901234567890123456789012345678901" }, "a Dot's name is 1 to 40 characters"),
		Entry("a name with a dot", func(d *dotsv1.Dot) { d.Name = "fare.watch" }, "a Dot's name is 1 to 40 characters"),
		Entry("untrustedInput.ask of known permissions and mcp.*", func(d *dotsv1.Dot) {
			d.Spec.UntrustedInput = &dotsv1.DotUntrustedInput{Ask: append(protocol.DefaultUntrustedAsk(), "browser.navigate")}
		}, ""),
		Entry("untrustedInput.ask of an unknown permission", func(d *dotsv1.Dot) {
			d.Spec.UntrustedInput = &dotsv1.DotUntrustedInput{Ask: []string{"computer.fly"}}
		}, "untrustedInput.ask names an unknown permission"),
		Entry("allowUntil of a known permission", func(d *dotsv1.Dot) {
			d.Spec.AllowUntil = map[string]metav1.Time{"computer.exec": metav1.Now()}
		}, ""),
		Entry("allowUntil of an unknown permission", func(d *dotsv1.Dot) {
			d.Spec.AllowUntil = map[string]metav1.Time{"computer.fly": metav1.Now()}
		}, "allowUntil names an unknown permission"),
		Entry("every known permission", func(d *dotsv1.Dot) {
			d.Spec.Permissions = map[string]dotsv1.Decision{}
			for _, p := range protocol.Permissions {
				d.Spec.Permissions[p.Name] = "ask"
			}
		}, ""),
		Entry("an unknown permission is refused by name", func(d *dotsv1.Dot) {
			d.Spec.Permissions = map[string]dotsv1.Decision{"web.search": "allow"}
		}, "unknown permission web.search"),
		Entry("a decision other than allow|ask|deny", func(d *dotsv1.Dot) {
			d.Spec.Permissions = map[string]dotsv1.Decision{"files.read": "maybe"}
		}, `supported values: "allow", "ask", "deny"`),
		Entry("mcp.<server> for a declared server", func(d *dotsv1.Dot) {
			d.Spec.MCPServers = []dotsv1.MCPServer{{Name: "time", Command: "uvx"}}
			d.Spec.Permissions = map[string]dotsv1.Decision{"mcp.time": "allow"}
		}, ""),
		Entry("mcp.<server> for an undeclared server", func(d *dotsv1.Dot) {
			d.Spec.Permissions = map[string]dotsv1.Decision{"mcp.time": "allow"}
		}, "permission mcp.time names no server declared in mcpServers"),
		Entry("the summary role", func(d *dotsv1.Dot) { d.Spec.Models = map[string]string{"summary": "openai/gpt-5-mini"} }, ""),
		Entry("another role", func(d *dotsv1.Dot) { d.Spec.Models = map[string]string{"fast": "openai/gpt-5-nano"} }, `unknown model role "fast" (the roles are: summary)`),
		Entry("a provider other than openrouter", func(d *dotsv1.Dot) { d.Spec.Model.Provider = "openai" }, "spec.model.provider"),
		Entry("an MCP server with both command and url", func(d *dotsv1.Dot) {
			d.Spec.MCPServers = []dotsv1.MCPServer{{Name: "s", Command: "x", URL: "https://s.example/mcp"}}
		}, "exactly one of command or url"),
		Entry("an MCP server with neither", func(d *dotsv1.Dot) { d.Spec.MCPServers = []dotsv1.MCPServer{{Name: "s"}} }, "exactly one of command or url"),
		Entry("an MCP server name with an underscore", func(d *dotsv1.Dot) {
			d.Spec.MCPServers = []dotsv1.MCPServer{{Name: "my_server", Command: "x"}}
		}, "spec.mcpServers[0].name"),
		Entry("an MCP server name of 33 characters", func(d *dotsv1.Dot) {
			d.Spec.MCPServers = []dotsv1.MCPServer{{Name: "a23456789012345678901234567890123", Command: "x"}}
		}, "spec.mcpServers[0].name"),
		Entry("a secret named twice", func(d *dotsv1.Dot) {
			d.Spec.MCPServers = []dotsv1.MCPServer{{Name: "s", Command: "x", Secrets: []string{"K", "K"}}}
		}, "Duplicate value"),
		Entry("a secret also written in env", func(d *dotsv1.Dot) {
			d.Spec.MCPServers = []dotsv1.MCPServer{{Name: "s", Command: "x", Env: map[string]string{"K": "v"}, Secrets: []string{"K"}}}
		}, "a secret cannot also be written as a value in env"),
		Entry("a secret also written in headers", func(d *dotsv1.Dot) {
			d.Spec.MCPServers = []dotsv1.MCPServer{{Name: "s", URL: "https://s.example/mcp", Headers: map[string]string{"Authorization": "x"}, Secrets: []string{"Authorization"}}}
		}, "a secret cannot also be written as a value in headers"),
		Entry("a url server with env", func(d *dotsv1.Dot) {
			d.Spec.MCPServers = []dotsv1.MCPServer{{Name: "s", URL: "https://s.example/mcp", Env: map[string]string{"A": "b"}}}
		}, "args and env belong to a command server"),
		Entry("two servers of one name", func(d *dotsv1.Dot) {
			d.Spec.MCPServers = []dotsv1.MCPServer{{Name: "s", Command: "x"}, {Name: "s", Command: "y"}}
		}, "Duplicate value"),
	)

	It("fills the defaults of CONFIG_BOUNDS", func() {
		d := validDot()
		Expect(k8sClient.Create(suiteCtx, d, &clientDryRun)).To(Succeed())
		Expect(d.Spec.Computer.CPU).To(BeEquivalentTo(b.CPU.Default))
		Expect(d.Spec.Computer.Memory.String()).To(Equal(fmt.Sprintf("%dGi", b.MemoryGiB.Default)))
		Expect(d.Spec.Computer.Disk.String()).To(Equal(fmt.Sprintf("%dGi", b.DiskGiB.Default)))
		Expect(d.Spec.Computer.IdleTimeout.Duration).To(Equal(b.IdleTimeoutDefault))
		Expect(d.Spec.Limits.MaxStepsPerTask).To(BeEquivalentTo(b.MaxStepsPerTask.Default))
		Expect(d.Spec.Limits.MaxCostPerTaskUSD).To(Equal(b.MaxCostPerTaskUSD.Default))
		Expect(d.Spec.Model.Provider).To(Equal(dotsv1.OpenRouter))
	})
})

var _ = Describe("Disks only grow", func() {
	It("refuses a smaller disk for a Dot and a Computer, saying so, and takes a larger one", func() {
		d := validDot()
		d.Spec.Computer.Disk = ptr.To(resource.MustParse("30Gi"))
		Expect(k8sClient.Create(suiteCtx, d)).To(Succeed())
		DeferCleanup(func() { _ = k8sClient.Delete(suiteCtx, d) })
		err := k8sClient.Patch(suiteCtx, d, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"computer":{"disk":"25Gi"}}}`)))
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(ContainSubstring("disks only grow: 25Gi is smaller than the 30Gi the computer has"))
		Expect(k8sClient.Patch(suiteCtx, d, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"computer":{"disk":"32212254720"}}}`)))).To(Succeed(), "the same size in bytes")
		Expect(k8sClient.Patch(suiteCtx, d, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"computer":{"disk":"35Gi"}}}`)))).To(Succeed(), "a larger disk")

		c := &dotsv1.Computer{
			ObjectMeta: metav1.ObjectMeta{Name: "c-" + rand.String(6), Namespace: "default"},
			Spec:       dotsv1.ComputerSpec{Disk: resource.MustParse("40Gi")},
		}
		Expect(k8sClient.Create(suiteCtx, c)).To(Succeed())
		DeferCleanup(func() { _ = k8sClient.Delete(suiteCtx, c) })
		err = k8sClient.Patch(suiteCtx, c, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"disk":"20Gi"}}`)))
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(ContainSubstring("disks only grow: 20Gi is smaller than the 40Gi"))
		Expect(k8sClient.Patch(suiteCtx, c, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"disk":"41Gi"}}`)))).To(Succeed(), "a larger disk")
	})
})

var _ = Describe("Task and Approval immutability", func() {
	It("keeps a Task's dotName and description", func() {
		t := &dotsv1.Task{
			ObjectMeta: metav1.ObjectMeta{Name: "t-" + rand.String(6), Namespace: "default"},
			Spec:       dotsv1.TaskSpec{DotName: "nobody", Description: "do one thing"},
		}
		Expect(k8sClient.Create(suiteCtx, t)).To(Succeed())
		DeferCleanup(func() { _ = k8sClient.Delete(suiteCtx, t) })

		// Merge patches carry no resourceVersion, so the reconciler's own
		// writes cannot make these fail for the wrong reason.
		err := k8sClient.Patch(suiteCtx, t, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"description":"do another thing"}}`)))
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(ContainSubstring("description cannot change"))

		err = k8sClient.Patch(suiteCtx, t, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"dotName":"someone"}}`)))
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(ContainSubstring("dotName cannot change"))

		Expect(k8sClient.Patch(suiteCtx, t, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"priority":5}}`)))).To(Succeed(), "priority may change")
	})

	It("keeps what an Approval asked", func() {
		a := &dotsv1.Approval{
			ObjectMeta: metav1.ObjectMeta{Name: "a-" + rand.String(6), Namespace: "default"},
			Spec:       dotsv1.ApprovalSpec{DotName: "nobody", Tool: "exec", Permission: "computer.exec"},
		}
		Expect(k8sClient.Create(suiteCtx, a)).To(Succeed())
		DeferCleanup(func() { _ = k8sClient.Delete(suiteCtx, a) })

		patch := func(p string) error {
			return k8sClient.Patch(suiteCtx, a, client.RawPatch(types.MergePatchType, []byte(p)))
		}
		// A decision is given once: approval_test.go's 409 already_resolved.
		Expect(patch(`{"spec":{"decision":"approve"}}`)).To(Succeed(), "the first decision is accepted")
		err := patch(`{"spec":{"tool":"write_file"}}`)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(ContainSubstring("what was asked cannot change"))
	})
})

var _ = Describe("What the control plane cannot store", func() {
	It("refuses a NUL in a Task's description, an Approval's note and a Dot's instructions, saying why", func() {
		t := &dotsv1.Task{
			ObjectMeta: metav1.ObjectMeta{Name: "t-" + rand.String(6), Namespace: "default"},
			Spec:       dotsv1.TaskSpec{DotName: "nobody", Description: "read \x00 this"},
		}
		err := k8sClient.Create(suiteCtx, t, &clientDryRun)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(And(ContainSubstring("spec.description"), ContainSubstring("NUL character")))

		a := &dotsv1.Approval{
			ObjectMeta: metav1.ObjectMeta{Name: "a-" + rand.String(6), Namespace: "default"},
			Spec:       dotsv1.ApprovalSpec{DotName: "nobody", Tool: "exec", Permission: "computer.exec", Note: "no\x00"},
		}
		err = k8sClient.Create(suiteCtx, a, &clientDryRun)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(And(ContainSubstring("spec.note"), ContainSubstring("NUL character")))

		d := validDot()
		d.Spec.Instructions = "be \x00 kind"
		expectVerdict(d, "NUL character")
	})

	It("refuses an object too large to store as a 413 naming the limit, and stores one just below it", func() {
		mcp := func(argBytes int) []dotsv1.MCPServer {
			return []dotsv1.MCPServer{{Name: "big", Command: "run", Args: []string{strings.Repeat("a", argBytes)}}}
		}
		d := validDot()
		d.Spec.MCPServers = mcp(1600 << 10)
		err := k8sClient.Create(suiteCtx, d)
		Expect(apierrors.IsRequestEntityTooLargeError(err)).To(BeTrue(), "want 413, got %v", err)
		Expect(err.Error()).To(ContainSubstring(fmt.Sprintf("limit is %d", 3<<19)))

		d = validDot()
		d.Spec.MCPServers = mcp(1400 << 10)
		Expect(k8sClient.Create(suiteCtx, d)).To(Succeed(), "a Dot of 1.4 MiB is stored")
		DeferCleanup(func() { _ = k8sClient.Delete(suiteCtx, d) })

		// A patch within the request bound that grows the Dot past what
		// the store takes is a 413 too, and the Dot is left as it was.
		grow := fmt.Sprintf(`[{"op":"add","path":"/spec/mcpServers/-","value":{"name":"more","command":"run","args":[%q]}}]`, strings.Repeat("b", 700<<10))
		err = k8sClient.Patch(suiteCtx, d, client.RawPatch(types.JSONPatchType, []byte(grow)))
		Expect(apierrors.IsRequestEntityTooLargeError(err)).To(BeTrue(), "want 413, got %v", err)
		Expect(err.Error()).To(And(ContainSubstring("Dot default/"+d.Name), ContainSubstring("1.50 MiB")))
		Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(d), d)).To(Succeed())
		Expect(d.Spec.MCPServers).To(HaveLen(1))
	})
})
