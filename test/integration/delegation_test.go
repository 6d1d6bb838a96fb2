package integration

import (
	"context"
	"encoding/json"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/store"
)

// pairOfDots is an asker and a receiver that both consent.
func pairOfDots() (asker *dotsv1.Dot, askerLog *guestLog, receiver *dotsv1.Dot, receiverLog *guestLog) {
	GinkgoHelper()
	// The names are chosen first so each Dot can name the other.
	askerName, receiverName := validDot().Name, validDot().Name
	receiver, receiverLog = namedDelegationDot(receiverName, nil, []string{askerName})
	asker, askerLog = namedDelegationDot(askerName, []string{receiverName}, nil)
	return asker, askerLog, receiver, receiverLog
}

// namedDelegationDot makes the Dot name with its delegation settings,
// allowing dots.delegate so a call needs no approval.
func namedDelegationDot(name string, canAsk, acceptsFrom []string) (*dotsv1.Dot, *guestLog) {
	GinkgoHelper()
	dot := validDot()
	dot.Name = name
	dot.Spec.Delegation = &dotsv1.DotDelegation{CanAsk: canAsk, AcceptsFrom: acceptsFrom}
	dot.Spec.Permissions = map[string]dotsv1.Decision{"dots.delegate": "allow"}
	Expect(k8sClient.Create(suiteCtx, dot)).To(Succeed())
	DeferCleanup(func() { _ = k8sClient.Delete(context.Background(), dot) })
	return dot, &guestLog{dot: store.Dot{Namespace: dot.Namespace, Name: dot.Name, UID: string(dot.UID)}}
}

// delegates stores the asker's guest's delegate_task call, as the pump
// would, made in task (nil: the chat).
func (g *guestLog) delegates(task *dotsv1.Task, receiver, description string) {
	GinkgoHelper()
	args, err := json.Marshal(map[string]any{"dot": receiver, "description": description})
	Expect(err).NotTo(HaveOccurred())
	called := protocol.ToolCalled{Tool: "delegate_task", Permission: "dots.delegate", Decision: protocol.Allow, OK: true,
		DurationMS: 1, Arguments: args}
	if task != nil {
		uid := string(task.UID)
		called.TaskID = &uid
	}
	g.says(protocol.EventToolCalled, called)
}

// requestsOf are the Tasks the asker asked for.
// seenByControllers waits until the controllers' cache holds the Dot's
// newest spec: the Dot reconciler records the generation it acted on, and
// the delegation controller reads the same cache. An API read alone shows
// the write before the cache may, so a request made right after it could be
// judged by the old spec.
func seenByControllers(dot *dotsv1.Dot) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		got := &dotsv1.Dot{}
		g.Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(dot), got)).To(Succeed())
		g.Expect(got.Status.ObservedGeneration).To(Equal(got.Generation))
	}).Should(Succeed())
}

func requestsOf(asker *dotsv1.Dot) []dotsv1.Task {
	GinkgoHelper()
	var list dotsv1.TaskList
	Expect(k8sClient.List(suiteCtx, &list, client.InNamespace(asker.Namespace),
		client.MatchingLabels{dotsv1.RequestedByLabel: asker.Name})).To(Succeed())
	return list.Items
}

// delegationNotes are the delegation system.events of the Dot's outbox, in
// the order enqueued.
func delegationNotes(d *dotsv1.Dot) []protocol.Delegation {
	GinkgoHelper()
	rows, err := logStore.Pending(suiteCtx, string(d.UID))
	Expect(err).NotTo(HaveOccurred())
	var out []protocol.Delegation
	for _, r := range rows {
		var ev protocol.SystemEvent
		if r.Type != protocol.InboundSystemEvent || json.Unmarshal(r.Data, &ev) != nil || ev.Name != protocol.SystemEventDelegation {
			continue
		}
		var n protocol.Delegation
		Expect(json.Unmarshal(ev.Data, &n)).To(Succeed())
		out = append(out, n)
	}
	return out
}

func outcomes(notes []protocol.Delegation) []string {
	var out []string
	for _, n := range notes {
		out = append(out, n.Outcome)
	}
	return out
}

// runningTask makes a task for dot and waits until the dispatcher gave it.
func runningTask(dot *dotsv1.Dot, name string) *dotsv1.Task {
	GinkgoHelper()
	t := newTask(dot, name, 0)
	Eventually(func() dotsv1.TaskPhase { return taskOf(t).Status.Phase }).Should(Equal(dotsv1.TaskRunning))
	return taskOf(t)
}

func cancelTask(t *dotsv1.Task) {
	GinkgoHelper()
	before := taskOf(t)
	after := before.DeepCopy()
	after.Spec.CancelRequested = true
	Expect(k8sClient.Patch(suiteCtx, after, client.MergeFrom(before))).To(Succeed())
}

var _ = Describe("Delegation", func() {
	It("passes a consented request on as one Task, brings the answer back and shows the spend together", func() {
		asker, askerLog, receiver, receiverLog := pairOfDots()
		parent := runningTask(asker, asker.Name+"-parent")

		By("a delegate_task call makes one Task for the receiver, recording who asked")
		askerLog.delegates(parent, receiver.Name, "find the price of x")
		Eventually(func() []dotsv1.Task { return requestsOf(asker) }).Should(HaveLen(1))
		child := requestsOf(asker)[0]
		Expect(child.Spec.DotName).To(Equal(receiver.Name))
		Expect(child.Spec.Description).To(Equal("find the price of x"))
		Expect(child.Spec.RequestedBy).NotTo(BeNil())
		Expect(child.Spec.RequestedBy.Dot).To(Equal(asker.Name))
		Expect(child.Spec.RequestedBy.Task).To(Equal(parent.Name))
		Expect(child.Spec.RequestedBy.Depth).To(BeEquivalentTo(1))
		Eventually(func() []string { return outcomes(delegationNotes(asker)) }).Should(Equal([]string{protocol.DelegationAccepted}))

		By("requestedBy cannot change")
		changed := child.DeepCopy()
		changed.Spec.RequestedBy.Depth = 2
		Expect(k8sClient.Patch(suiteCtx, changed, client.MergeFrom(&child))).NotTo(Succeed())

		By("the receiver works it as its own task; its end comes back to the asker, once")
		Eventually(func() dotsv1.TaskPhase { return taskOf(&child).Status.Phase }).Should(Equal(dotsv1.TaskRunning))
		childID := string(child.UID)
		receiverLog.says(protocol.EventTaskStarted, protocol.TaskStarted{TaskID: childID})
		childSpent, parentSpent := 0.02, 0.01
		pid := string(parent.UID)
		askerLog.says(protocol.EventTaskProgress, protocol.TaskProgress{TaskID: pid, Text: "asked", SpentUSD: &parentSpent})
		receiverLog.says(protocol.EventTaskCompleted, protocol.TaskCompleted{TaskID: childID, Summary: "x costs 42 EUR", SpentUSD: &childSpent})
		Eventually(func() []string { return outcomes(delegationNotes(asker)) }).Should(Equal([]string{protocol.DelegationAccepted, "COMPLETED"}))
		answer := delegationNotes(asker)[1]
		Expect(answer.Dot).To(Equal(receiver.Name))
		Expect(answer.Task).To(Equal(child.Name))
		Expect(answer.Text).To(ContainSubstring("x costs 42 EUR"))

		By("the parent task shows its own spend and its request's, each counted where it happened")
		Eventually(func(g Gomega) {
			got := taskOf(parent)
			g.Expect(got.Status.SpentUSD).To(BeNumerically("~", 0.01, 1e-9))
			g.Expect(got.Status.DelegatedSpentUSD).To(BeNumerically("~", 0.02, 1e-9))
		}).Should(Succeed())
		Expect(taskOf(&child).Status.SpentUSD).To(BeNumerically("~", 0.02, 1e-9))
		Consistently(func() int { return len(requestsOf(asker)) }, "1s").Should(Equal(1))
		Expect(delegationNotes(asker)).To(HaveLen(2))
	})

	It("passes on, under the default ask, only a request a person approved with these very arguments", func() {
		asker, askerLog, receiver, _ := pairOfDots()
		got := &dotsv1.Dot{}
		Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(asker), got)).To(Succeed())
		asks := got.DeepCopy()
		asks.Spec.Permissions = nil // dots.delegate at its default, ask
		Expect(k8sClient.Patch(suiteCtx, asks, client.MergeFrom(got))).To(Succeed())
		seenByControllers(asker)

		args := json.RawMessage(`{"description":"summarise the report","dot":"` + receiver.Name + `"}`)
		askerLog.says(protocol.EventApprovalRequested, protocol.ApprovalRequested{ApprovalID: "req-deleg", Tool: "delegate_task",
			Permission: "dots.delegate", Arguments: args, Reason: "The Dot's configuration asks"})
		approval := approvalFor(asker, "req-deleg")
		approved := approval.DeepCopy()
		approved.Spec.Decision = dotsv1.Approve
		Expect(k8sClient.Patch(suiteCtx, approved, client.MergeFrom(approval))).To(Succeed())
		id := store.Dot{Namespace: asker.Namespace, Name: asker.Name, UID: string(asker.UID)}
		Eventually(func() []string { return outbox(id) }).Should(ContainElement("approval.received:"))

		By("the approved call makes the Task, naming the approval it used")
		askerLog.delegates(nil, receiver.Name, "summarise the report")
		Eventually(func() []dotsv1.Task { return requestsOf(asker) }).Should(HaveLen(1))
		Expect(requestsOf(asker)[0].Annotations).To(HaveKeyWithValue(dotsv1.DelegationApprovalAnnotation, approval.Name))

		By("another call, never approved, is refused; so is the same call again: an approval passes one request on")
		askerLog.delegates(nil, receiver.Name, "something else")
		askerLog.delegates(nil, receiver.Name, "summarise the report")
		Eventually(func() []string { return outcomes(delegationNotes(asker)) }).Should(Equal([]string{
			protocol.DelegationAccepted, protocol.DelegationRefused, protocol.DelegationRefused}))
		Expect(delegationNotes(asker)[2].Text).To(ContainSubstring("no person approved this request"))
		Expect(requestsOf(asker)).To(HaveLen(1))
	})

	It("refuses a request either Dot did not consent to, or past the depth or the fan-out, saying why", func() {
		asker, askerLog, receiver, _ := pairOfDots()
		stranger, _ := namedDelegationDot(validDot().Name, nil, nil)
		refusedWith := func(fragment string) {
			GinkgoHelper()
			Eventually(func() []protocol.Delegation { return delegationNotes(asker) }).Should(ContainElement(
				And(HaveField("Outcome", protocol.DelegationRefused), HaveField("Text", ContainSubstring(fragment)))))
		}

		By("the asker's canAsk does not name the Dot (a guest that went round its own check)")
		askerLog.delegates(nil, stranger.Name, "do it")
		refusedWith("your delegation.canAsk does not name " + stranger.Name)

		By("the receiver does not accept from the asker")
		patched := asker.DeepCopy()
		patched.Spec.Delegation.CanAsk = append(patched.Spec.Delegation.CanAsk, stranger.Name)
		Expect(k8sClient.Patch(suiteCtx, patched, client.MergeFrom(asker))).To(Succeed())
		seenByControllers(asker)
		askerLog.delegates(nil, stranger.Name, "do it again")
		refusedWith(stranger.Name + " does not accept requests from you")

		By("a request already 3 deep asks no further")
		deep := &dotsv1.Task{}
		deep.Namespace, deep.Name = asker.Namespace, asker.Name+"-deep"
		deep.Spec = dotsv1.TaskSpec{DotName: asker.Name, Description: "deep work",
			RequestedBy: &dotsv1.TaskRequester{Dot: receiver.Name, Depth: dotsv1.MaxDelegationDepth}}
		Expect(k8sClient.Create(suiteCtx, deep)).To(Succeed())
		Eventually(func() dotsv1.TaskPhase { return taskOf(deep).Status.Phase }).Should(Equal(dotsv1.TaskRunning))
		askerLog.delegates(taskOf(deep), receiver.Name, "deeper")
		refusedWith("at most 3 deep")
		Expect(requestsOf(asker)).To(BeEmpty())

		By("at most five requests are open at once")
		for i := range dotsv1.MaxDelegationFanOut {
			askerLog.delegates(nil, receiver.Name, "part "+string(rune('a'+i)))
		}
		Eventually(func() []dotsv1.Task { return requestsOf(asker) }).Should(HaveLen(dotsv1.MaxDelegationFanOut))
		askerLog.delegates(nil, receiver.Name, "one too many")
		refusedWith("5 requests open already")
		Consistently(func() []dotsv1.Task { return requestsOf(asker) }, "1s").Should(HaveLen(dotsv1.MaxDelegationFanOut))
	})

	It("cancels the tree with the asker's task, and the open requests of a pair whose consent is taken back", func() {
		asker, askerLog, receiver, receiverLog := pairOfDots()
		third, _ := namedDelegationDot(validDot().Name, nil, []string{receiver.Name})
		patched := receiver.DeepCopy()
		patched.Spec.Delegation.CanAsk = []string{third.Name}
		Expect(k8sClient.Patch(suiteCtx, patched, client.MergeFrom(receiver))).To(Succeed())
		parent := runningTask(asker, asker.Name+"-parent")

		By("a tree of two requests: the asker asks the receiver, which asks a third Dot in that task")
		askerLog.delegates(parent, receiver.Name, "plan the trip")
		Eventually(func() []dotsv1.Task { return requestsOf(asker) }).Should(HaveLen(1))
		child := requestsOf(asker)[0]
		Eventually(func() dotsv1.TaskPhase { return taskOf(&child).Status.Phase }).Should(Equal(dotsv1.TaskRunning))
		receiverLog.delegates(taskOf(&child), third.Name, "book the train")
		Eventually(func() []dotsv1.Task { return requestsOf(receiver) }).Should(HaveLen(1))
		grandchild := requestsOf(receiver)[0]
		Expect(grandchild.Spec.RequestedBy.Depth).To(BeEquivalentTo(2))
		Expect(grandchild.Spec.RequestedBy.Task).To(Equal(child.Name))

		By("cancelling the asker's task cancels the whole tree")
		cancelTask(parent)
		Eventually(func() bool { return taskOf(&child).Spec.CancelRequested }).Should(BeTrue())
		Eventually(func() bool { return taskOf(&grandchild).Spec.CancelRequested }).Should(BeTrue())

		By("taking consent back cancels the pair's open requests and tells the asker")
		other := runningTask(asker, asker.Name+"-other")
		askerLog.delegates(other, receiver.Name, "check the weather")
		Eventually(func() []dotsv1.Task { return requestsOf(asker) }).Should(HaveLen(2))
		var open dotsv1.Task
		for _, t := range requestsOf(asker) {
			if t.Name != child.Name {
				open = t
			}
		}
		Expect(open.Spec.CancelRequested).To(BeFalse())
		got := &dotsv1.Dot{}
		Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(receiver), got)).To(Succeed())
		revoked := got.DeepCopy()
		revoked.Spec.Delegation.AcceptsFrom = nil
		Expect(k8sClient.Patch(suiteCtx, revoked, client.MergeFrom(got))).To(Succeed())
		Eventually(func() bool { return taskOf(&open).Spec.CancelRequested }).Should(BeTrue())
		Eventually(func() []protocol.Delegation { return delegationNotes(asker) }).Should(ContainElement(
			And(HaveField("Task", open.Name), HaveField("Outcome", "CANCELLED"),
				HaveField("Text", ContainSubstring(receiver.Name+" no longer accepts requests from you")))))
		Expect(taskOf(other).Spec.CancelRequested).To(BeFalse(), "the asker's own task goes on")
	})

	It("cancels the open requests of an asker that is deleted", func() {
		asker, askerLog, receiver, _ := pairOfDots()
		askerLog.delegates(nil, receiver.Name, "keep watch")
		Eventually(func() []dotsv1.Task { return requestsOf(asker) }).Should(HaveLen(1))
		child := requestsOf(asker)[0]
		Expect(k8sClient.Delete(suiteCtx, asker)).To(Succeed())
		Eventually(func() bool { return taskOf(&child).Spec.CancelRequested }).Should(BeTrue())
	})
})
