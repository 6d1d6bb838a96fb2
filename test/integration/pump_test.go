package integration

import (
	"context"
	"encoding/json"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
	dotsclient "github.com/invisible-dots/invisible-dots/internal/dotsapi/client"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
	"github.com/invisible-dots/invisible-dots/internal/keystore"
	"github.com/invisible-dots/invisible-dots/internal/store"
)

// scriptedEngine is what the suite's fake engine does with what the
// deliverer sends it: it answers a message, completes a task, asks for an
// approval for a task that says "ask" and completes it once approved, and
// refuses a task that says "refuse".
func scriptedEngine(ev protocol.InboundEvent) []protocol.OutboundEvent {
	out := func(typ string, data any) protocol.OutboundEvent {
		raw, err := json.Marshal(data)
		Expect(err).NotTo(HaveOccurred())
		return protocol.OutboundEvent{Type: typ, Data: raw}
	}
	spent := 0.0123
	switch ev.Type {
	case protocol.InboundUserMessage:
		var m protocol.UserMessage
		_ = json.Unmarshal(ev.Data, &m)
		return []protocol.OutboundEvent{out(protocol.EventMessageAssistant, protocol.MessageAssistant{Text: "echo: " + m.Text, InReplyTo: ptr.To(ev.ID)})}
	case protocol.InboundTaskCreated:
		var t protocol.TaskCreated
		_ = json.Unmarshal(ev.Data, &t)
		started := out(protocol.EventTaskStarted, protocol.TaskStarted{TaskID: t.TaskID})
		if strings.Contains(t.Description, "ask") {
			return []protocol.OutboundEvent{started, out(protocol.EventApprovalRequested, protocol.ApprovalRequested{
				ApprovalID: "req-" + t.TaskID, TaskID: ptr.To(t.TaskID), Tool: "exec", Permission: "computer.exec",
				Arguments: json.RawMessage(`{"command":"make test"}`), Reason: "run the tests"})}
		}
		return []protocol.OutboundEvent{started, out(protocol.EventTaskCompleted, protocol.TaskCompleted{TaskID: t.TaskID, Summary: "done: " + t.Description, SpentUSD: &spent})}
	case protocol.InboundApprovalReceived:
		var a protocol.ApprovalReceived
		_ = json.Unmarshal(ev.Data, &a)
		task := strings.TrimPrefix(a.ApprovalID, "req-")
		return []protocol.OutboundEvent{
			out(protocol.EventToolCalled, protocol.ToolCalled{TaskID: ptr.To(task), Tool: "exec", Permission: "computer.exec", Decision: protocol.Ask, OK: true, DurationMS: 5}),
			out(protocol.EventTaskCompleted, protocol.TaskCompleted{TaskID: task, Summary: "ran after the approval", SpentUSD: &spent}),
		}
	}
	return nil
}

var _ = Describe("The event pump and the deliverer", Ordered, func() {
	var (
		dot  *dotsv1.Dot
		id   store.Dot
		dots *dotsclient.Client
	)
	BeforeAll(func() {
		fakeEngine.SetReply(scriptedEngine)
		fakeEngine.SetRefuse(func(ev protocol.InboundEvent) bool {
			return ev.Type == protocol.InboundTaskCreated && strings.Contains(string(ev.Data), "refuse")
		})
		DeferCleanup(func() { fakeEngine.SetReply(nil); fakeEngine.SetRefuse(nil) })
		dot = createDot("default")
		DeferCleanup(func() { _ = k8sClient.Delete(context.Background(), dot) })
		id = store.Dot{Namespace: dot.Namespace, Name: dot.Name, UID: string(dot.UID)}
		// The Dot's own key (the suite's default key comes and goes with
		// other specs); stored again on a conflict with the Dot's reconcilers.
		Eventually(func() error {
			_, err := keystore.StoreForDot(suiteCtx, k8sClient, types.NamespacedName{Namespace: dot.Namespace, Name: dot.Name}, "sk-or-integration-pump")
			return err
		}).Should(Succeed())
		var err error
		dots, err = dotsclient.New(cp.Config)
		Expect(err).NotTo(HaveOccurred())
		Eventually(func(g Gomega) {
			d := &dotsv1.Dot{}
			g.Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(dot), d)).To(Succeed())
			readyWithGuest(g, d)
		}).Should(Succeed())
	})

	It("answers a message: delivered to the engine, its answer pumped into the log", func() {
		accepted, err := dots.PostMessage(suiteCtx, dot.Namespace, dot.Name, "hello")
		Expect(err).NotTo(HaveOccurred())
		Eventually(func(g Gomega) {
			page, err := dots.Messages(suiteCtx, dot.Namespace, dot.Name, wire.MessagesQuery{})
			g.Expect(err).NotTo(HaveOccurred())
			var got []string
			for _, m := range page.Messages {
				got = append(got, m.Role+": "+m.Text)
			}
			g.Expect(got).To(Equal([]string{"user: hello", "assistant: echo: hello"}))
			g.Expect(page.Messages[1].InReplyTo).To(Equal(store.MessageID(accepted.EventID)))
		}).Should(Succeed())
		Expect(outbox(id)).To(BeEmpty())
	})

	It("gives a task to the engine, which completes it: phase, summary and spend from the pumped log", func() {
		t := newTask(dot, dot.Name+"-build", 0)
		Eventually(func(g Gomega) {
			got := taskOf(t)
			g.Expect(got.Status.Phase).To(Equal(dotsv1.TaskCompleted))
			g.Expect(got.Status.Summary).To(Equal("done: do " + t.Name))
			g.Expect(got.Status.SpentUSD).To(BeNumerically("~", 0.0123, 1e-9))
		}).Should(Succeed())
	})

	It("takes a person's decision to the engine, which goes on", func() {
		t := newTask(dot, dot.Name+"-ask", 0)
		t = taskOf(t)
		var approval dotsv1.Approval
		Eventually(func() error {
			return k8sClient.Get(suiteCtx, types.NamespacedName{Namespace: dot.Namespace, Name: dotsv1.ApprovalName(dot.Name, "req-"+string(t.UID))}, &approval)
		}).Should(Succeed())
		Eventually(func() dotsv1.TaskPhase { return taskOf(t).Status.Phase }).Should(Equal(dotsv1.TaskWaitingApproval))
		decided := approval.DeepCopy()
		decided.Spec.Decision = dotsv1.Approve
		Expect(k8sClient.Patch(suiteCtx, decided, client.MergeFrom(&approval))).To(Succeed())
		Eventually(func(g Gomega) {
			got := taskOf(t)
			g.Expect(got.Status.Phase).To(Equal(dotsv1.TaskCompleted))
			g.Expect(got.Status.Summary).To(Equal("ran after the approval"))
		}).Should(Succeed())
	})

	It("gives a task up when the engine refuses its task.created: FAILED, logged once", func() {
		t := newTask(dot, dot.Name+"-refuse", 0)
		Eventually(func(g Gomega) {
			got := taskOf(t)
			g.Expect(got.Status.Phase).To(Equal(dotsv1.TaskFailed))
			g.Expect(got.Status.Error).To(ContainSubstring("could not be given to its Dot: the guest refused task.created"))
			g.Expect(got.Status.Error).NotTo(ContainSubstring("the engine refuses it"), "the guest's own words stay out")
		}).Should(Succeed())
		Expect(outbox(id)).To(BeEmpty())
	})

	It("stores every guest event once, in the guest's order", func() {
		c, err := getComputer(dot)
		Expect(err).NotTo(HaveOccurred())
		stream := fakeEngine.Stream(int(c.Status.GuestPort), int(c.Status.PID))
		// A dropped stream on the way: the pump opens it again after the
		// cursor.
		stream.Drop()
		stream.Append(protocol.OutboundEvent{Type: protocol.EventAgentState, Data: json.RawMessage(`{"state":"IDLE"}`)},
			protocol.OutboundEvent{Type: protocol.EventAgentState, Data: json.RawMessage(`{"state":"IDLE"}`)})
		// The engine wrote 7 events for the work above, and these 2.
		want := []int64{1, 2, 3, 4, 5, 6, 7, 8, 9}
		Eventually(func(g Gomega) {
			events, err := logStore.EventsAfter(suiteCtx, id.UID, 0, 1000)
			g.Expect(err).NotTo(HaveOccurred())
			var seqs []int64
			for _, e := range events {
				if e.GuestSeq != nil {
					seqs = append(seqs, *e.GuestSeq)
				}
			}
			g.Expect(seqs).To(Equal(want))
		}).Should(Succeed())
		Expect(stream.Opened()).To(HaveLen(2), "the stream was opened again after it dropped")
	})
})
