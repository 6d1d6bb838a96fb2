package integration

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/internal/controlplane"
	"github.com/invisible-dots/invisible-dots/internal/scheme"
)

var _ = Describe("A host agent", Ordered, func() {
	var (
		rogue        client.Client
		rogueName    string
		dot          *dotsv1.Dot
		placedOn     string
		expectDenied = func(err error, fragment string) {
			GinkgoHelper()
			Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
			Expect(err.Error()).To(ContainSubstring(fragment))
		}
	)

	BeforeAll(func() {
		// Another host's agent, joined as `invisible-dots host join` does.
		rogueName = "rogue-" + rand.String(4)
		admin, err := clientcmd.LoadFromFile(cp.KubeconfigPath)
		Expect(err).NotTo(HaveOccurred())
		kubeconfig, err := controlplane.JoinHost(suiteCtx, *admin, rogueName, 3600e9)
		Expect(err).NotTo(HaveOccurred())
		cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
		Expect(err).NotTo(HaveOccurred())
		rogue, err = client.New(cfg, client.Options{Scheme: scheme.Scheme})
		Expect(err).NotTo(HaveOccurred())

		dot = createDot(newNamespace("restrict"))
		Eventually(func(g Gomega) {
			c := &dotsv1.Computer{}
			g.Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(dot), c)).To(Succeed())
			g.Expect(c.Spec.NodeName).NotTo(BeEmpty())
			placedOn = c.Spec.NodeName
		}).Should(Succeed())
		Expect(placedOn).NotTo(Equal(rogueName))
	})

	It("writes its own Host and Lease, and no other host's", func() {
		own := &dotsv1.Host{ObjectMeta: metav1.ObjectMeta{Name: rogueName}}
		Expect(rogue.Create(suiteCtx, own)).To(Succeed())
		DeferCleanup(func() { _ = k8sClient.Delete(suiteCtx, own) })
		expectDenied(rogue.Create(suiteCtx, &dotsv1.Host{ObjectMeta: metav1.ObjectMeta{Name: "not-" + rogueName}}), "writes its own Host only")

		other := &dotsv1.Host{}
		Expect(k8sClient.Get(suiteCtx, client.ObjectKey{Name: placedOn}, other)).To(Succeed())
		before := other.DeepCopy()
		other.Status.QEMUVersion = "0.0.1"
		expectDenied(rogue.Status().Patch(suiteCtx, other, client.MergeFrom(before)), "writes its own Host only")

		lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: dotsv1.SystemNamespace, Name: rogueName},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(rogueName)}}
		Expect(rogue.Create(suiteCtx, lease)).To(Succeed())
		DeferCleanup(func() { _ = k8sClient.Delete(suiteCtx, lease) })
		// Their agent renews it meanwhile: a write on a version it already
		// renewed is a conflict before it is anything else, so it is tried
		// on the latest until the answer is the refusal.
		var err error
		for range 5 {
			theirs := &coordinationv1.Lease{}
			Expect(k8sClient.Get(suiteCtx, client.ObjectKey{Namespace: dotsv1.SystemNamespace, Name: placedOn}, theirs)).To(Succeed())
			theirs.Spec.HolderIdentity = ptr.To(rogueName)
			if err = rogue.Update(suiteCtx, theirs); !apierrors.IsConflict(err) {
				break
			}
		}
		expectDenied(err, "renews its own Lease only")
	})

	It("writes neither the Computers of another host nor the status of their Dots", func() {
		c := &dotsv1.Computer{}
		Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(dot), c)).To(Succeed())
		before := c.DeepCopy()
		c.Status.StopReason = dotsv1.StopUser
		expectDenied(rogue.Status().Patch(suiteCtx, c, client.MergeFrom(before)), "the Computers placed on its host only")
		c = before.DeepCopy()
		c.Finalizers = nil
		expectDenied(rogue.Patch(suiteCtx, c, client.MergeFrom(before)), "the Computers placed on its host only")

		d := &dotsv1.Dot{}
		Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(dot), d)).To(Succeed())
		dBefore := d.DeepCopy()
		d.Status.AgentState = "IDLE"
		expectDenied(rogue.Status().Patch(suiteCtx, d, client.MergeFrom(dBefore)), "whose Computer is on its host only")
	})
})
