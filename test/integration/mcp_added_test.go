package integration

import (
	"context"
	"encoding/json"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
	"github.com/invisible-dots/invisible-dots/internal/store"
)

var _ = Describe("An MCP server the Dot adds itself", func() {
	It("is written into the spec under its own field manager only with an approval of its exact arguments, once", func() {
		dot := validDot()
		Expect(k8sClient.Create(suiteCtx, dot)).To(Succeed())
		DeferCleanup(func() { _ = k8sClient.Delete(context.Background(), dot) })
		id := store.Dot{Namespace: dot.Namespace, Name: dot.Name, UID: string(dot.UID)}
		guest := &guestLog{dot: id}
		args := json.RawMessage(`{"name":"time","command":"uvx","args":["mcp-server-time"],"secrets":["TIME_KEY"],"reason":"to tell the time"}`)
		logged := func(typ string) []map[string]any {
			events, err := logStore.EventsAfter(suiteCtx, id.UID, 0, 1000)
			Expect(err).NotTo(HaveOccurred())
			var out []map[string]any
			for _, e := range events {
				var d map[string]any
				if e.Type == typ && e.Source == store.SourceHost && json.Unmarshal(e.Data, &d) == nil && d["mcp_event"] != nil {
					out = append(out, d)
				}
			}
			return out
		}

		// The guest speaks at once, while the controllers log the Dot's
		// first events: an event committed between a controller's
		// read of the log and its own decision must still be folded.
		By("without an approval the addition is refused and nothing is written")
		guest.says(protocol.EventMCPServerAdded, protocol.MCPServerAdded{Arguments: args})
		Eventually(func() []map[string]any { return logged(wire.EventMCPServerRefused) }).Should(HaveLen(1), func() string {
			events, _ := logStore.EventsAfter(suiteCtx, id.UID, 0, 1000)
			out := ""
			for _, e := range events {
				out += e.Type + " " + string(e.Data) + "\n"
			}
			return out
		})

		By("approved, the same call is written, under its own field manager, and logged as dot.updated")
		guest.says(protocol.EventApprovalRequested, protocol.ApprovalRequested{ApprovalID: "req-mcp", Tool: "add_mcp_server",
			Permission: "mcp.servers.add", Arguments: args, Reason: "The Dot's configuration asks"})
		approval := approvalFor(dot, "req-mcp")
		approved := approval.DeepCopy()
		approved.Spec.Decision = dotsv1.Approve
		Expect(k8sClient.Patch(suiteCtx, approved, client.MergeFrom(approval))).To(Succeed())
		// The guest runs the approved call once the decision reached it.
		Eventually(func() []string { return outbox(id) }).Should(ContainElement("approval.received:"))
		guest.says(protocol.EventMCPServerAdded, protocol.MCPServerAdded{Arguments: args})
		Eventually(func(g Gomega) {
			got := &dotsv1.Dot{}
			g.Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(dot), got)).To(Succeed())
			g.Expect(got.Spec.MCPServers).To(HaveLen(1))
			s := got.Spec.MCPServers[0]
			g.Expect(s.Name).To(Equal("time"))
			g.Expect(s.Command).To(Equal("uvx"))
			g.Expect(s.Args).To(Equal([]string{"mcp-server-time"}))
			g.Expect(s.Secrets).To(Equal([]string{"TIME_KEY"}))
			managers := []string{}
			for _, m := range got.ManagedFields {
				managers = append(managers, m.Manager)
			}
			g.Expect(managers).To(ContainElement("invisible-dots-mcp-add/time"))
		}).Should(Succeed())
		Eventually(func() []map[string]any { return logged(wire.EventDotUpdated) }).Should(ContainElement(
			HaveKeyWithValue("approval_id", "req-mcp")))

		By("the approval is used up: the same call again is refused")
		guest.says(protocol.EventMCPServerAdded, protocol.MCPServerAdded{Arguments: args})
		Eventually(func() []map[string]any { return logged(wire.EventMCPServerRefused) }).Should(HaveLen(2))
		Consistently(func() []map[string]any { return logged(wire.EventDotUpdated) }, "1s").Should(HaveLen(1))
	})
})
