package integration

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/internal/hostidentity"
)

// A host reads its own guests' Secrets and no other host's, even in the
// same namespace, as Kubernetes' node authorizer keeps a kubelet to its
// own pods' Secrets.
var _ = Describe("Host access to Secrets", func() {
	It("lets a host read only the Secrets of the Computers placed on it, and takes them away when they go", func() {
		ns := newNamespace("access")
		agentOf := func(host string) kubernetes.Interface {
			cfg := rest.CopyConfig(cp.Config)
			cfg.Impersonate = rest.ImpersonationConfig{
				UserName: serviceaccount.MakeUsername(dotsv1.SystemNamespace, hostidentity.ServiceAccount(host)),
				Groups:   []string{serviceaccount.AllServiceAccountsGroup, user.AllAuthenticated},
			}
			cs, err := kubernetes.NewForConfig(cfg)
			Expect(err).NotTo(HaveOccurred())
			return cs
		}
		// Host a is the suite's own agent, where the Dot's Computer is
		// placed; host b is only a name, with a Computer placed on it by
		// hand.
		a, b := agentOf(fakeHostName), agentOf("access-b")
		computer := func(name, host string) *dotsv1.Computer {
			c := &dotsv1.Computer{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
				Spec: dotsv1.ComputerSpec{CPU: 1, Memory: resource.MustParse("256Mi"), Disk: resource.MustParse("1Gi"),
					RunStrategy: dotsv1.RunHalted, NodeName: host},
			}
			Expect(k8sClient.Create(suiteCtx, c)).To(Succeed())
			return c
		}
		cb := computer("other-b", "access-b")
		for _, name := range []string{"da-keys", dotsv1.GuestTokenSecretName("other-b")} {
			Expect(k8sClient.Create(suiteCtx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
				StringData: map[string]string{"k": "v"}})).To(Succeed())
		}
		get := func(cs kubernetes.Interface, name string) error {
			_, err := cs.CoreV1().Secrets(ns).Get(suiteCtx, name, metav1.GetOptions{})
			return err
		}
		Eventually(func() error { return get(b, dotsv1.GuestTokenSecretName("other-b")) }).Should(Succeed(), "host b reads its guest's token")
		Expect(apierrors.IsForbidden(get(b, "da-keys"))).To(BeTrue(), "host b reads a Secret of no guest of its")
		_, err := b.CoreV1().Secrets(ns).List(suiteCtx, metav1.ListOptions{})
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "a host lists the namespace's Secrets: %v", err)

		By("the Dot's own Secret (its key and MCP secrets) and its token go to the host of its Computer alone")
		dot := validDot()
		dot.Namespace, dot.Name = ns, "da"
		dot.Spec.SecretRef = &dotsv1.SecretReference{Name: "da-keys"}
		Expect(k8sClient.Create(suiteCtx, dot)).To(Succeed())
		Eventually(func() error { return get(a, "da-keys") }).Should(Succeed())
		Eventually(func() error { return get(a, dotsv1.GuestTokenSecretName("da")) }).Should(Succeed(), "host a made and reads its guest's token")
		Expect(apierrors.IsForbidden(get(b, "da-keys"))).To(BeTrue(), "host b reads the keys of a Dot on host a")
		Expect(apierrors.IsForbidden(get(b, dotsv1.GuestTokenSecretName("da")))).To(BeTrue(), "host b reads host a's guest's token")
		Expect(apierrors.IsForbidden(get(a, dotsv1.GuestTokenSecretName("other-b")))).To(BeTrue(), "host a reads host b's guest's token")

		By("taking the access away when the Computer goes")
		Expect(k8sClient.Delete(suiteCtx, cb)).To(Succeed())
		Eventually(func() bool { return apierrors.IsForbidden(get(b, dotsv1.GuestTokenSecretName("other-b"))) }).Should(BeTrue())
	})
})
