package integration

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
)

func createDot(ns string) *dotsv1.Dot {
	GinkgoHelper()
	d := validDot()
	d.Namespace = ns
	Expect(k8sClient.Create(suiteCtx, d)).To(Succeed())
	return d
}

func getComputer(d *dotsv1.Dot) (*dotsv1.Computer, error) {
	c := &dotsv1.Computer{}
	err := k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(d), c)
	return c, err
}

var _ = Describe("The Dot reconciler", func() {
	It("creates the Dot's Computer, owned by it, with spec.computer's size", func() {
		d := createDot("default")
		DeferCleanup(func() { _ = k8sClient.Delete(suiteCtx, d) })

		var c *dotsv1.Computer
		Eventually(func() error {
			var err error
			c, err = getComputer(d)
			return err
		}).Should(Succeed())
		Expect(metav1.IsControlledBy(c, d)).To(BeTrue())
		Expect(c.Spec.CPU).To(Equal(d.Spec.Computer.CPU))
		Expect(c.Spec.Memory.Cmp(resource.MustParse("4Gi"))).To(Equal(0))
		Expect(c.Spec.RunStrategy).To(Equal(dotsv1.RunOnDemand))

		By("keeping a finalizer until the Computer is gone")
		Eventually(func(g Gomega) {
			g.Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(d), d)).To(Succeed())
			g.Expect(d.Finalizers).To(ContainElement(dotsv1.DotFinalizer))
		}).Should(Succeed())

		By("resizing the Computer when spec.computer changes, keeping its run strategy")
		Expect(k8sClient.Patch(suiteCtx, c, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"runStrategy":"Always"}}`)))).To(Succeed())
		Expect(k8sClient.Patch(suiteCtx, d, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"computer":{"cpu":4}}}`)))).To(Succeed())
		Eventually(func(g Gomega) {
			c, err := getComputer(d)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(c.Spec.CPU).To(BeEquivalentTo(4))
			g.Expect(c.Spec.RunStrategy).To(Equal(dotsv1.RunAlways))
		}).Should(Succeed())

		By("recording the observed generation and the Computer's state")
		Eventually(func(g Gomega) {
			g.Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(d), d)).To(Succeed())
			g.Expect(d.Status.ObservedGeneration).To(Equal(d.Generation))
			g.Expect(meta.FindStatusCondition(d.Status.Conditions, dotsv1.ReadyCondition)).NotTo(BeNil())
			g.Expect(meta.FindStatusCondition(d.Status.Conditions, dotsv1.ComputerReadyCondition)).NotTo(BeNil())
			g.Expect(d.Status.Phase).NotTo(BeEmpty())
		}).Should(Succeed())
	})

	It("reports a Computer of its name that it does not own, and leaves it alone", func() {
		name := "c-" + rand.String(6)
		foreign := &dotsv1.Computer{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: dotsv1.ComputerSpec{RunStrategy: dotsv1.RunHalted}}
		Expect(k8sClient.Create(suiteCtx, foreign)).To(Succeed())
		DeferCleanup(func() {
			_ = k8sClient.Delete(suiteCtx, foreign)
		})
		d := validDot()
		d.Name = name
		Expect(k8sClient.Create(suiteCtx, d)).To(Succeed())
		DeferCleanup(func() { _ = k8sClient.Delete(suiteCtx, d) })
		Eventually(func(g Gomega) {
			g.Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(d), d)).To(Succeed())
			g.Expect(d.Status.Phase).To(Equal(dotsv1.DotError))
			c := meta.FindStatusCondition(d.Status.Conditions, dotsv1.ComputerReadyCondition)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Reason).To(Equal(dotsv1.ComputerConflictReason))
		}).Should(Succeed())
		c, err := getComputer(d)
		Expect(err).NotTo(HaveOccurred())
		Expect(c.OwnerReferences).To(BeEmpty())
	})

	It("binds Tasks and Approvals to their Dot, and records a decision", func() {
		d := createDot("default")
		DeferCleanup(func() { _ = k8sClient.Delete(suiteCtx, d) })
		t := &dotsv1.Task{ObjectMeta: metav1.ObjectMeta{Name: "t-" + rand.String(6), Namespace: "default"}, Spec: dotsv1.TaskSpec{DotName: d.Name, Description: "x"}}
		Expect(k8sClient.Create(suiteCtx, t)).To(Succeed())
		a := &dotsv1.Approval{ObjectMeta: metav1.ObjectMeta{Name: "a-" + rand.String(6), Namespace: "default"}, Spec: dotsv1.ApprovalSpec{DotName: d.Name, Tool: "exec", Permission: "computer.exec"}}
		Expect(k8sClient.Create(suiteCtx, a)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(t), t)).To(Succeed())
			g.Expect(metav1.IsControlledBy(t, d)).To(BeTrue())
			// Bound, then given to the Dot by the dispatcher.
			g.Expect(t.Status.Phase).To(BeElementOf(dotsv1.TaskPending, dotsv1.TaskRunning))
			g.Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(a), a)).To(Succeed())
			g.Expect(metav1.IsControlledBy(a, d)).To(BeTrue())
			g.Expect(a.Status.Phase).To(Equal(dotsv1.ApprovalPending))
		}).Should(Succeed())

		By("answering with a merge patch, as kubectl patch does")
		Expect(k8sClient.Patch(suiteCtx, a, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"decision":"approve"}}`)))).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(a), a)).To(Succeed())
			g.Expect(a.Status.Phase).To(Equal(dotsv1.ApprovalApproved))
			g.Expect(a.Status.DecidedAt).NotTo(BeNil())
		}).Should(Succeed())
	})
})

var _ = Describe("A Task's binding to its Dot", func() {
	It("is made at the Task's admission when the Dot exists", func() {
		d := createDot("default")
		DeferCleanup(func() { _ = k8sClient.Delete(suiteCtx, d) })
		t := &dotsv1.Task{ObjectMeta: metav1.ObjectMeta{Name: "t-" + rand.String(6), Namespace: "default"}, Spec: dotsv1.TaskSpec{DotName: d.Name, Description: "x"}}
		Expect(k8sClient.Create(suiteCtx, t)).To(Succeed())
		DeferCleanup(func() { _ = k8sClient.Delete(suiteCtx, t) })
		// The object the create answered with: no controller has run yet.
		Expect(metav1.IsControlledBy(t, d)).To(BeTrue(), "owner references %v", t.OwnerReferences)
		Expect(t.Status.Phase).To(BeEmpty())
	})

	It("waits, bound to nothing, for a Dot not made yet, and is bound when it is", func() {
		d := validDot()
		d.Name = "later-" + rand.String(6)
		t := &dotsv1.Task{ObjectMeta: metav1.ObjectMeta{Name: "t-" + rand.String(6), Namespace: "default"}, Spec: dotsv1.TaskSpec{DotName: d.Name, Description: "x"}}
		Expect(k8sClient.Create(suiteCtx, t)).To(Succeed())
		DeferCleanup(func() { _ = k8sClient.Delete(suiteCtx, t) })
		Eventually(func(g Gomega) {
			g.Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(t), t)).To(Succeed())
			c := meta.FindStatusCondition(t.Status.Conditions, dotsv1.DotBoundCondition)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Reason).To(Equal(dotsv1.DotMissingReason))
		}).Should(Succeed())
		Expect(t.OwnerReferences).To(BeEmpty())

		By("making the Dot: its creation wakes the Task")
		Expect(k8sClient.Create(suiteCtx, d)).To(Succeed())
		DeferCleanup(func() { _ = k8sClient.Delete(suiteCtx, d) })
		Eventually(func(g Gomega) {
			g.Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(t), t)).To(Succeed())
			g.Expect(metav1.IsControlledBy(t, d)).To(BeTrue())
			c := meta.FindStatusCondition(t.Status.Conditions, dotsv1.DotBoundCondition)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
		}).Should(Succeed())
	})
})

var _ = Describe("Cascading deletion", func() {
	It("deletes a Dot's Computer, Tasks and Approvals with it", func() {
		d := createDot("default")
		t := &dotsv1.Task{ObjectMeta: metav1.ObjectMeta{Name: "t-" + rand.String(6), Namespace: "default"}, Spec: dotsv1.TaskSpec{DotName: d.Name, Description: "x"}}
		Expect(k8sClient.Create(suiteCtx, t)).To(Succeed())
		Eventually(func(g Gomega) {
			_, err := getComputer(d)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(t), t)).To(Succeed())
			g.Expect(metav1.IsControlledBy(t, d)).To(BeTrue())
		}).Should(Succeed())

		Expect(k8sClient.Delete(suiteCtx, d)).To(Succeed())
		Eventually(func() bool {
			_, err := getComputer(d)
			return apierrors.IsNotFound(err)
		}).Should(BeTrue(), "the Computer goes")
		Eventually(func() bool {
			return apierrors.IsNotFound(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(d), &dotsv1.Dot{}))
		}).Should(BeTrue(), "the Dot goes once its Computer is gone")
		Eventually(func() bool {
			return apierrors.IsNotFound(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(t), &dotsv1.Task{}))
		}, "60s").Should(BeTrue(), "the garbage collector deletes the Task")
	})

	It("empties and removes a deleted namespace", func() {
		ns := &unstructured.Unstructured{}
		ns.SetAPIVersion("v1")
		ns.SetKind("Namespace")
		ns.SetName("ns-" + rand.String(6))
		Expect(k8sClient.Create(suiteCtx, ns)).To(Succeed())
		d := createDot(ns.GetName())
		Eventually(func() error { _, err := getComputer(d); return err }).Should(Succeed())
		Expect(k8sClient.Delete(suiteCtx, ns)).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(ns), ns))
		}, "90s").Should(BeTrue())
	})
})

var _ = Describe("Server-side apply", func() {
	It("reports a conflict between two managers and lets the owner change its field", func() {
		name := "ssa-" + rand.String(6)
		apply := func(manager, model string, force bool) error {
			u := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "dots.invisible.dev/v1alpha1",
				"kind":       "Dot",
				"metadata":   map[string]any{"name": name, "namespace": "default"},
				"spec":       map[string]any{"model": map[string]any{"id": model}},
			}}
			opts := []client.PatchOption{client.FieldOwner(manager)}
			if force {
				opts = append(opts, client.ForceOwnership)
			}
			return k8sClient.Patch(suiteCtx, u, client.Apply, opts...) //nolint:staticcheck // unstructured apply
		}
		Expect(apply("alice", "z-ai/glm-5.3-flash", false)).To(Succeed())
		DeferCleanup(func() {
			_ = k8sClient.Delete(suiteCtx, &dotsv1.Dot{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}})
		})
		Expect(apply("alice", "openai/gpt-5-mini", false)).To(Succeed(), "the owner changes its own field")
		err := apply("bob", "anthropic/claude-sonnet-5", false)
		Expect(apierrors.IsConflict(err)).To(BeTrue(), "want a conflict, got %v", err)
		Expect(err.Error()).To(ContainSubstring(`conflict with "alice"`))
		Expect(apply("bob", "anthropic/claude-sonnet-5", true)).To(Succeed(), "--force-conflicts takes it over")
		d := &dotsv1.Dot{}
		Expect(k8sClient.Get(suiteCtx, types.NamespacedName{Namespace: "default", Name: name}, d)).To(Succeed())
		Expect(d.Spec.Model.ID).To(Equal("anthropic/claude-sonnet-5"))
	})
})
