package integration

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/keystore"
)

// condOf is a Dot's condition of a type, or an empty one.
func condOf(d *dotsv1.Dot, typ string) metav1.Condition {
	if c := meta.FindStatusCondition(d.Status.Conditions, typ); c != nil {
		return *c
	}
	return metav1.Condition{Type: typ}
}

// readyWithGuest: the Dot is READY, its three steps hold, and ConfigApplied
// is of its generation.
func readyWithGuest(g Gomega, d *dotsv1.Dot) {
	g.Expect(d.Status.Phase).To(Equal(dotsv1.DotReady), "conditions: %+v", d.Status.Conditions)
	for _, typ := range []string{dotsv1.KeyPushedCondition, dotsv1.ConfigAppliedCondition, dotsv1.AgentReadyCondition} {
		g.Expect(condOf(d, typ).Status).To(Equal(metav1.ConditionTrue), "%s: %+v", typ, condOf(d, typ))
	}
	applied := condOf(d, dotsv1.ConfigAppliedCondition)
	g.Expect(applied.ObservedGeneration).To(Equal(d.Generation))
	g.Expect(applied.Message).To(ContainSubstring("generation %d", d.Generation))
}

var _ = Describe("The guest link", Ordered, func() {
	var dot *dotsv1.Dot
	getDot := func(g Gomega) *dotsv1.Dot {
		d := &dotsv1.Dot{}
		g.Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(dot), d)).To(Succeed())
		return d
	}
	// pushed is what the Dot's guest (its current QEMU) holds.
	pushed := func(g Gomega) (string, *protocol.RuntimeConfig) {
		c, err := getComputer(dot)
		g.Expect(err).NotTo(HaveOccurred())
		p := fakeEngine.Pushed(int(c.Status.GuestPort), int(c.Status.PID))
		return p.Key, p.Config
	}
	defaultKey := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: dotsv1.SystemNamespace, Name: dotsv1.DefaultKeySecretName}}

	BeforeAll(func() {
		_ = k8sClient.Delete(suiteCtx, defaultKey)
		dot = createDot("default")
		DeferCleanup(func() {
			_ = k8sClient.Delete(context.Background(), dot)
			_ = k8sClient.Delete(context.Background(), defaultKey)
		})
	})

	It("waits for a key with the command that stores one, while the computer runs", func() {
		Eventually(func(g Gomega) {
			d := getDot(g)
			g.Expect(d.Status.ComputerState).To(Equal(dotsv1.ComputerRunning))
			key := condOf(d, dotsv1.KeyPushedCondition)
			g.Expect(key.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(key.Reason).To(Equal(dotsv1.NoKeyReason))
			g.Expect(key.Message).To(ContainSubstring(`"invisible-dots secret openrouter"`))
			g.Expect(condOf(d, dotsv1.ConfigAppliedCondition).Reason).To(Equal(dotsv1.WaitingReason))
			g.Expect(d.Status.Phase).To(Equal(dotsv1.DotCreating))
			g.Expect(condOf(d, dotsv1.ReadyCondition).Message).To(ContainSubstring("KeyPushed"))
		}).Should(Succeed())
	})

	It("becomes READY once the host-wide key is stored: key, then configuration, then the engine's health", func() {
		_, err := keystore.StoreDefault(suiteCtx, k8sClient, "sk-or-integration-default")
		Expect(err).NotTo(HaveOccurred())
		Eventually(func(g Gomega) {
			readyWithGuest(g, getDot(g))
			key, cfg := pushed(g)
			g.Expect(key).To(Equal("sk-or-integration-default"))
			g.Expect(cfg).NotTo(BeNil())
			// Resolved with the defaults: a permission the Dot does not list.
			g.Expect(cfg.Permissions).To(HaveKeyWithValue("automations", protocol.Ask))
		}).Should(Succeed())
	})

	It("pushes the Dot's own key, which wins, and its new generation", func() {
		stored, err := keystore.StoreForDot(suiteCtx, k8sClient, types.NamespacedName{Namespace: dot.Namespace, Name: dot.Name}, "sk-or-integration-own")
		Expect(err).NotTo(HaveOccurred())
		Expect(stored.RefSet).To(BeTrue())
		Eventually(func(g Gomega) {
			d := getDot(g)
			g.Expect(d.Spec.SecretRef).NotTo(BeNil())
			readyWithGuest(g, d)
			key, _ := pushed(g)
			g.Expect(key).To(Equal("sk-or-integration-own"))
			g.Expect(condOf(d, dotsv1.KeyPushedCondition).Message).To(ContainSubstring(stored.Secret.String()))
		}).Should(Succeed())
	})

	It("pushes a changed spec as the generation it applied", func() {
		Eventually(func() error {
			d := &dotsv1.Dot{}
			if err := k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(dot), d); err != nil {
				return err
			}
			d.Spec.Permissions = map[string]dotsv1.Decision{"computer.exec": "deny"}
			return k8sClient.Update(suiteCtx, d)
		}).Should(Succeed())
		Eventually(func(g Gomega) {
			readyWithGuest(g, getDot(g))
			_, cfg := pushed(g)
			g.Expect(cfg).NotTo(BeNil())
			g.Expect(cfg.Permissions).To(HaveKeyWithValue("computer.exec", protocol.Deny))
		}).Should(Succeed())
	})
})
