package integration

import (
	"encoding/json"
	"strings"
	"sync"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/controllers"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
	"github.com/invisible-dots/invisible-dots/internal/store"
)

// makeQuota makes the namespace's DotQuota with an active-Dots cap.
func makeQuota(ns string, active int32) *dotsv1.DotQuota {
	GinkgoHelper()
	q := &dotsv1.DotQuota{ObjectMeta: metav1.ObjectMeta{Name: dotsv1.DotQuotaName, Namespace: ns},
		Spec: dotsv1.DotQuotaSpec{ActiveDots: ptr.To(active)}}
	Expect(k8sClient.Create(suiteCtx, q)).To(Succeed())
	return q
}

// quotaOf reads the namespace's DotQuota.
func quotaOf(g Gomega, ns string) *dotsv1.DotQuota {
	q := &dotsv1.DotQuota{}
	g.Expect(k8sClient.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: dotsv1.DotQuotaName}, q)).To(Succeed())
	return q
}

// runningComputers counts the namespace's Computers that run or start.
func runningComputers(g Gomega, ns string) []string {
	var list dotsv1.ComputerList
	g.Expect(k8sClient.List(suiteCtx, &list, client.InNamespace(ns))).To(Succeed())
	var names []string
	for _, c := range list.Items {
		switch c.Status.State {
		case dotsv1.ComputerRunning, dotsv1.ComputerStarting:
			names = append(names, c.Name)
		}
	}
	return names
}

// applyDotsAtOnce creates n Dots of ns from n goroutines.
func applyDotsAtOnce(ns string, n int) []*dotsv1.Dot {
	GinkgoHelper()
	dots := make([]*dotsv1.Dot, n)
	var wg sync.WaitGroup
	for i := range dots {
		d := validDot()
		d.Namespace = ns
		dots[i] = d
		wg.Go(func() {
			defer GinkgoRecover()
			Expect(k8sClient.Create(suiteCtx, d)).To(Succeed())
		})
	}
	wg.Wait()
	return dots
}

var _ = Describe("Quota: a namespace's DotQuota", func() {
	It("refuses a second DotQuota in a namespace (one per namespace, named default)", func() {
		ns := newNamespace("dq-name")
		q := &dotsv1.DotQuota{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: ns}}
		err := k8sClient.Create(suiteCtx, q)
		Expect(err).To(MatchError(ContainSubstring("named default")))
	})

	It("gives the last active slot to one Dot only when many take it at once", func() {
		ns := newNamespace("dq-slot")
		makeQuota(ns, 1)
		// Real Dots (the quota controller gives back the slot of a Dot
		// that does not exist), whose power controller takes slots too.
		var names []string
		for _, d := range applyDotsAtOnce(ns, 10) {
			names = append(names, d.Name)
		}
		// Their computers made (gated): a slot of a Dot without one is
		// given back.
		Eventually(func(g Gomega) {
			var list dotsv1.ComputerList
			g.Expect(k8sClient.List(suiteCtx, &list, client.InNamespace(ns))).To(Succeed())
			g.Expect(list.Items).To(HaveLen(10))
		}).Should(Succeed())
		results := make([]bool, len(names))
		var wg sync.WaitGroup
		for i, name := range names {
			wg.Go(func() {
				defer GinkgoRecover()
				a, err := controllers.TakeActiveSlot(suiteCtx, k8sClient, ns, name)
				Expect(err).NotTo(HaveOccurred())
				results[i] = a.Admitted
			})
		}
		wg.Wait()
		admitted := 0
		for _, ok := range results {
			if ok {
				admitted++
			}
		}
		Expect(admitted).To(Equal(1), "admitted: %v", results)
		Expect(quotaOf(Default, ns).Status.Admitted).To(HaveLen(1))
	})

	It("starts one Dot of ten applied at once against a cap of one, keeps the others inactive with their reason, and gives the slot on at a stop", func() {
		ns := newNamespace("dq-active")
		makeQuota(ns, 1)
		dots := applyDotsAtOnce(ns, 10)
		Eventually(func(g Gomega) {
			g.Expect(runningComputers(g, ns)).To(HaveLen(1))
			g.Expect(quotaOf(g, ns).Status.Admitted).To(HaveLen(1))
		}).Should(Succeed())
		Consistently(func(g Gomega) {
			g.Expect(len(runningComputers(g, ns))).To(BeNumerically("<=", 1))
			g.Expect(quotaOf(g, ns).Status.Admitted).To(HaveLen(1))
		}, "3s", "100ms").Should(Succeed())

		By("saying on each Dot beyond the cap which cap holds it and how to change it")
		first := quotaOf(Default, ns).Status.Admitted[0]
		Eventually(func(g Gomega) {
			for _, d := range dots {
				if d.Name == first {
					continue
				}
				got := &dotsv1.Dot{}
				g.Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(d), got)).To(Succeed())
				c := meta.FindStatusCondition(got.Status.Conditions, dotsv1.AdmittedCondition)
				g.Expect(c).NotTo(BeNil(), "Dot %s", d.Name)
				g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
				g.Expect(c.Reason).To(Equal(dotsv1.ActiveDotsCapReason))
				g.Expect(c.Message).To(ContainSubstring("1 of 1 active Dots in namespace " + ns))
				g.Expect(c.Message).To(ContainSubstring("spec.activeDots"))
			}
			q := quotaOf(g, ns)
			g.Expect(meta.IsStatusConditionTrue(q.Status.Conditions, dotsv1.ActiveDotsCapReachedCondition)).To(BeTrue())
		}).Should(Succeed())

		By("giving the slot to another Dot once a person stops the first one's computer")
		c := &dotsv1.Computer{}
		Expect(k8sClient.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: first}, c)).To(Succeed())
		halted := c.DeepCopy()
		halted.Halt()
		Expect(k8sClient.Patch(suiteCtx, halted, client.MergeFrom(c))).To(Succeed())
		Eventually(func(g Gomega) {
			q := quotaOf(g, ns)
			g.Expect(q.Status.Admitted).To(HaveLen(1))
			g.Expect(q.Status.Admitted[0]).NotTo(Equal(first))
			g.Expect(runningComputers(g, ns)).To(Equal(q.Status.Admitted))
		}).Should(Succeed())
	})

	It("stops nothing when the cap is lowered, and starts nothing new until under it", func() {
		ns := newNamespace("dq-lower")
		q := makeQuota(ns, 2)
		applyDotsAtOnce(ns, 2)
		Eventually(func(g Gomega) {
			g.Expect(runningComputers(g, ns)).To(HaveLen(2))
		}).Should(Succeed())
		Expect(k8sClient.Patch(suiteCtx, q, client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"activeDots":1}}`)))).To(Succeed())
		late := createDot(ns)
		Consistently(func(g Gomega) {
			g.Expect(runningComputers(g, ns)).To(HaveLen(2))
			g.Expect(runningComputers(g, ns)).NotTo(ContainElement(late.Name))
		}, "3s", "100ms").Should(Succeed())
		Eventually(func(g Gomega) {
			got := quotaOf(g, ns)
			g.Expect(got.Status.Admitted).To(HaveLen(2))
			g.Expect(got.Status.ActiveDots).To(BeEquivalentTo(2))
		}).Should(Succeed())
	})
})

var _ = Describe("Quota: a namespace's daily spend cap", func() {
	It("holds new tasks once the day's spend reaches the cap, asks once for the namespace, lets work flow when approved and fails the held tasks when rejected", func() {
		ns := newNamespace("dq-spend")
		q := &dotsv1.DotQuota{ObjectMeta: metav1.ObjectMeta{Name: dotsv1.DotQuotaName, Namespace: ns},
			Spec: dotsv1.DotQuotaSpec{SpendPerDayUSD: ptr.To("1")}}
		Expect(k8sClient.Create(suiteCtx, q)).To(Succeed())
		dot := createDot(ns)
		id := store.Dot{Namespace: dot.Namespace, Name: dot.Name, UID: string(dot.UID)}
		guest := &guestLog{dot: id}

		By("a task under the cap goes; its spend (the stand-in's cost) reaches the cap")
		t1 := newTask(dot, "first", 0)
		Eventually(func() dotsv1.TaskPhase { return taskOf(t1).Status.Phase }).Should(Equal(dotsv1.TaskRunning))
		t1 = taskOf(t1)
		spent := 1.5
		guest.says(protocol.EventTaskCompleted, protocol.TaskCompleted{TaskID: string(t1.UID), Summary: "done", SpentUSD: &spent})
		Eventually(func(g Gomega) {
			got := quotaOf(g, ns)
			g.Expect(got.Status.SpentTodayUSD).To(Equal("1.50"))
			g.Expect(meta.IsStatusConditionTrue(got.Status.Conditions, dotsv1.SpendCapReachedCondition)).To(BeTrue())
			g.Expect(got.Status.SpendRequest).NotTo(BeNil())
			g.Expect(got.Status.SpendRequest.Phase).To(Equal(dotsv1.SpendRequestPending))
			g.Expect(got.Status.SpendRequest.Message).To(Equal("spent $1.50 of $1.00 today in namespace " + ns + "; allow $1.00 more?"))
		}).Should(Succeed())

		By("a new task stays PENDING, saying why, and nothing is sent")
		t2 := newTask(dot, "second", 0)
		Eventually(func(g Gomega) {
			got := taskOf(t2)
			c := meta.FindStatusCondition(got.Status.Conditions, dotsv1.HeldCondition)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(c.Reason).To(Equal(dotsv1.SpendCapHeldReason))
		}).Should(Succeed())
		t2 = taskOf(t2)
		Consistently(func(g Gomega) {
			g.Expect(taskOf(t2).Status.Phase).To(Equal(dotsv1.TaskPending))
			g.Expect(outbox(id)).NotTo(ContainElement("task.created:" + string(t2.UID)))
		}, "2s", "100ms").Should(Succeed())

		By("the question is an Approval in the Dot's log, as every other: the Inbox, approve and the channels show it")
		first := quotaOf(Default, ns).Status.SpendRequest
		Expect(first.Dot).To(Equal(dot.Name), "the Dot of the oldest held task carries it")
		Expect(first.RequestID).To(Equal("spend-" + first.Day + "-1.00"))
		asked := approvalFor(dot, first.RequestID)
		Expect(asked.Spec.Permission).To(Equal(protocol.SpendPermission))
		Expect(asked.Spec.TaskName).To(BeEmpty())
		Expect(asked.Spec.Reason).To(Equal(first.Message))
		Eventually(func() dotsv1.ApprovalPhase { return approvalFor(dot, first.RequestID).Status.Phase }).Should(Equal(dotsv1.ApprovalPending))
		Consistently(func() []string { return spendLog(id) }, "1s", "100ms").
			Should(Equal([]string{"asked:" + first.RequestID}), "asked once, however often the quota is looked at")

		By("a person approves the Approval: the quota allows the suggested $1 more and the held task goes")
		asked = approvalFor(dot, first.RequestID)
		approved := asked.DeepCopy()
		approved.Spec.Decision = dotsv1.Approve
		Expect(k8sClient.Patch(suiteCtx, approved, client.MergeFrom(asked))).To(Succeed())
		Eventually(func() dotsv1.TaskPhase { return taskOf(t2).Status.Phase }).Should(Equal(dotsv1.TaskRunning))
		Expect(outbox(id)).NotTo(ContainElement("approval.received:"), "the guest never asked: nothing goes to it")
		Eventually(func(g Gomega) {
			q := quotaOf(g, ns)
			g.Expect(q.Spec.SpendDecision).To(Equal(&dotsv1.SpendDecision{Day: first.Day, Decision: dotsv1.Approve, ExtraUSD: ptr.To("1.00")}))
			g.Expect(q.Status.ExtraTodayUSD).To(Equal("1.00"))
			g.Expect(meta.IsStatusConditionTrue(q.Status.Conditions, dotsv1.SpendCapReachedCondition)).To(BeFalse())
			c := meta.FindStatusCondition(taskOf(t2).Status.Conditions, dotsv1.HeldCondition)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
		}).Should(Succeed())

		By("the extra is spent too: the next task is held again; a person rejects more and it fails")
		spent = 2
		guest.says(protocol.EventTaskCompleted, protocol.TaskCompleted{TaskID: string(t2.UID), Summary: "done", SpentUSD: &spent})
		Eventually(func(g Gomega) {
			q := quotaOf(g, ns)
			g.Expect(q.Status.SpentTodayUSD).To(Equal("3.50"))
			g.Expect(q.Status.SpendRequest.Phase).To(Equal(dotsv1.SpendRequestPending))
		}).Should(Succeed())
		t3 := newTask(dot, "third", 0)
		Eventually(func(g Gomega) {
			g.Expect(meta.IsStatusConditionTrue(taskOf(t3).Status.Conditions, dotsv1.HeldCondition)).To(BeTrue())
		}).Should(Succeed())
		second := quotaOf(Default, ns).Status.SpendRequest
		Expect(second.RequestID).To(Equal("spend-"+second.Day+"-2.00"), "asked again: another question")
		Expect(approvalFor(dot, second.RequestID).Spec.Permission).To(Equal(protocol.SpendPermission))

		By("a person rejects on the quota itself ('invisible-dots quota reject'): the Approval follows")
		got := quotaOf(Default, ns)
		rejected := got.DeepCopy()
		rejected.Spec.SpendDecision = &dotsv1.SpendDecision{Day: got.Status.SpendRequest.Day, Decision: dotsv1.Reject}
		Expect(k8sClient.Patch(suiteCtx, rejected, client.MergeFrom(got))).To(Succeed())
		Eventually(func() dotsv1.ApprovalPhase { return approvalFor(dot, second.RequestID).Status.Phase }).Should(Equal(dotsv1.ApprovalRejected))
		Eventually(func() []string { return spendLog(id) }).Should(Equal([]string{"asked:" + first.RequestID, first.RequestID + ":approve",
			"asked:" + second.RequestID, second.RequestID + ":reject"}))
		Eventually(func(g Gomega) {
			got := taskOf(t3)
			g.Expect(got.Status.Phase).To(Equal(dotsv1.TaskFailed))
			g.Expect(got.Status.Error).To(ContainSubstring("daily spend cap of namespace " + ns))
			g.Expect(got.Status.Error).To(ContainSubstring("the request for more was rejected"))
		}).Should(Succeed())
		Expect(outbox(id)).NotTo(ContainElement("task.created:" + string(taskOf(t3).UID)))
	})
})

// spendLog is the Dot's log of the namespace's spend questions: each host
// approval.requested of protocol.SpendPermission as "asked:ID", each
// approval.resolved of one as "ID:DECISION", in log order.
func spendLog(d store.Dot) []string {
	GinkgoHelper()
	events, err := logStore.Events(suiteCtx, store.EventQuery{DotUID: d.UID,
		Types: []string{wire.EventApprovalRequested, wire.EventApprovalResolved}, Limit: 100})
	Expect(err).NotTo(HaveOccurred())
	var out []string
	for _, e := range events {
		var a struct {
			ID         string `json:"approval_id"`
			Permission string `json:"permission"`
			Decision   string `json:"decision"`
		}
		Expect(json.Unmarshal(e.Data, &a)).To(Succeed())
		switch {
		case e.Type == wire.EventApprovalRequested && e.Source == store.SourceHost && a.Permission == protocol.SpendPermission:
			out = append(out, "asked:"+a.ID)
		case e.Type == wire.EventApprovalResolved && strings.HasPrefix(a.ID, "spend-"):
			out = append(out, a.ID+":"+a.Decision)
		}
	}
	return out
}
