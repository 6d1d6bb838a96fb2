package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/controlplane"
	dotsclient "github.com/invisible-dots/invisible-dots/internal/dotsapi/client"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
	"github.com/invisible-dots/invisible-dots/internal/store"
)

// newNamespace makes a namespace of the spec, deleted after it.
func newNamespace(prefix string) string {
	GinkgoHelper()
	n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: prefix + "-" + rand.String(5)}}
	Expect(k8sClient.Create(suiteCtx, n)).To(Succeed())
	DeferCleanup(func() { _ = k8sClient.Delete(context.Background(), n) })
	return n.Name
}

// personWithRole makes a person: a ServiceAccount of ns bound there to the
// ClusterRole role by a RoleBinding, and a Dots API client with a token of
// it from the TokenRequest API.
func personWithRole(cs kubernetes.Interface, ns, name, role string) *dotsclient.Client {
	GinkgoHelper()
	_, err := cs.CoreV1().ServiceAccounts(ns).Create(suiteCtx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	_, err = cs.RbacV1().RoleBindings(ns).Create(suiteCtx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-" + role},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns}},
	}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	controlplane.WaitUntilAllowed(suiteCtx, cs, serviceaccount.MakeUsername(ns, name), authorizationv1.ResourceAttributes{
		Namespace: ns, Verb: "get", Group: dotsv1.GroupVersion.Group, Resource: "dots",
	})
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(suiteCtx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(3600))},
	}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	cfg := rest.AnonymousClientConfig(cp.Config)
	cfg.BearerToken = tr.Status.Token
	c, err := dotsclient.New(cfg)
	Expect(err).NotTo(HaveOccurred())
	return c
}

// hostAgent joins host as `invisible-dots host join` does and returns a Dots
// API client with the host agent's own credential.
func hostAgent(host string) *dotsclient.Client {
	GinkgoHelper()
	admin, err := clientcmd.LoadFromFile(cp.KubeconfigPath)
	Expect(err).NotTo(HaveOccurred())
	kubeconfig, err := controlplane.JoinHost(suiteCtx, *admin, host, time.Hour)
	Expect(err).NotTo(HaveOccurred())
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	Expect(err).NotTo(HaveOccurred())
	c, err := dotsclient.New(cfg)
	Expect(err).NotTo(HaveOccurred())
	return c
}

// expectRefused checks an error answer's status and, for the Dots API's own
// answers, its code (the API server's filters answer without one).
func expectRefused(err error, status int, code string) {
	GinkgoHelper()
	Expect(err).To(HaveOccurred())
	Expect(dotsclient.StatusOf(err)).To(Equal(status), "%v", err)
	Expect(dotsclient.CodeOf(err)).To(Equal(code), "%v", err)
}

var _ = Describe("The Dots API", Ordered, func() {
	var (
		cs         kubernetes.Interface
		nsA, nsB   string
		dotA, dotB *dotsv1.Dot
		host       string
	)

	BeforeAll(func() {
		var err error
		cs, err = kubernetes.NewForConfig(cp.Config)
		Expect(err).NotTo(HaveOccurred())
		nsA, nsB = newNamespace("chat-a"), newNamespace("chat-b")
		dotA, dotB = createDot(nsA), createDot(nsB)
		Eventually(func(g Gomega) {
			c := &dotsv1.Computer{}
			g.Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(dotA), c)).To(Succeed())
			g.Expect(c.Spec.NodeName).NotTo(BeEmpty())
			host = c.Spec.NodeName
		}).Should(Succeed())
	})

	It("lets an editor post and read a Dot's messages in its namespace only, and a viewer read only", func() {
		editor := personWithRole(cs, nsA, "eddie", "dots-editor")
		viewer := personWithRole(cs, nsA, "vera", "dots-viewer")

		accepted, err := editor.PostMessage(suiteCtx, nsA, dotA.Name, "book the 9:40 train")
		Expect(err).NotTo(HaveOccurred())
		Expect(accepted.Queued).To(BeTrue())

		for who, c := range map[string]*dotsclient.Client{"the editor": editor, "the viewer": viewer} {
			got, err := c.Messages(suiteCtx, nsA, dotA.Name, wire.MessagesQuery{})
			Expect(err).NotTo(HaveOccurred(), who)
			Expect(got.Messages).To(HaveLen(1), who)
			Expect(got.Messages[0].EventID).To(Equal(accepted.EventID), who)
			Expect(got.Messages[0].Role).To(Equal(wire.RoleUser), who)
			Expect(got.Messages[0].Text).To(Equal("book the 9:40 train"), who)
		}

		By("queuing the message for the guest in the outbox, for the deliverer")
		rows, err := store.New(cp.DB.Pool()).Pending(suiteCtx, string(dotA.UID))
		Expect(err).NotTo(HaveOccurred())
		Expect(rows).To(HaveLen(1))
		Expect(rows[0].ID).To(Equal(store.MessageID(accepted.EventID)))
		Expect(rows[0].Type).To(Equal(protocol.InboundUserMessage))

		By("refusing the viewer's post and the editor's reach into another namespace")
		_, err = viewer.PostMessage(suiteCtx, nsA, dotA.Name, "hello")
		expectRefused(err, http.StatusForbidden, wire.CodeForbidden)
		_, err = editor.PostMessage(suiteCtx, nsB, dotB.Name, "hello")
		expectRefused(err, http.StatusForbidden, wire.CodeForbidden)
		_, err = editor.Messages(suiteCtx, nsB, dotB.Name, wire.MessagesQuery{})
		expectRefused(err, http.StatusForbidden, wire.CodeForbidden)

		By("keeping people out of the host agents' prefix at the API server's own gate")
		_, err = editor.IngestEvents(suiteCtx, host, nsA, dotA.Name, string(dotA.UID), nil)
		expectRefused(err, http.StatusForbidden, "")
	})

	It("lets a person bound to the built-in edit or view role reach the Dots, as the aggregation labels promise", func() {
		// Without the ClusterRole aggregation controller the built-in roles
		// stay empty selectors on the embedded server, and WaitUntilAllowed
		// in personWithRole gives up.
		for _, role := range []string{"edit", "view"} {
			Eventually(func(g Gomega) {
				r, err := cs.RbacV1().ClusterRoles().Get(suiteCtx, role, metav1.GetOptions{})
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(r.Rules).To(ContainElement(HaveField("Resources", ContainElement("dots/messages"))), "the %s role holds the Dots' rules", role)
			}).Should(Succeed())
		}
		editor := personWithRole(cs, nsA, "edna", "edit")
		viewer := personWithRole(cs, nsA, "vic", "view")
		_, err := editor.PostMessage(suiteCtx, nsA, dotA.Name, "hello from the edit role")
		Expect(err).NotTo(HaveOccurred())
		got, err := viewer.Messages(suiteCtx, nsA, dotA.Name, wire.MessagesQuery{})
		Expect(err).NotTo(HaveOccurred())
		Expect(got.Messages).NotTo(BeEmpty())
		_, err = viewer.PostMessage(suiteCtx, nsA, dotA.Name, "hello from the view role")
		expectRefused(err, http.StatusForbidden, wire.CodeForbidden)
	})

	It("gives a person added with user add a kubeconfig of their own for one namespace", func() {
		admin, err := clientcmd.LoadFromFile(cp.KubeconfigPath)
		Expect(err).NotTo(HaveOccurred())
		kubeconfigOf := func(name, role string) *dotsclient.Client {
			data, expires, err := controlplane.AddUser(suiteCtx, *admin, name, nsA, role, time.Hour)
			Expect(err).NotTo(HaveOccurred())
			Expect(expires).To(BeTemporally("~", time.Now().Add(time.Hour), time.Minute))
			cfg, err := clientcmd.RESTConfigFromKubeConfig(data)
			Expect(err).NotTo(HaveOccurred())
			raw, err := clientcmd.Load(data)
			Expect(err).NotTo(HaveOccurred())
			Expect(raw.Contexts[raw.CurrentContext].Namespace).To(Equal(nsA))
			c, err := dotsclient.New(cfg)
			Expect(err).NotTo(HaveOccurred())
			return c
		}
		ada, bob := kubeconfigOf("ada", "editor"), kubeconfigOf("bob", "viewer")
		_, err = ada.PostMessage(suiteCtx, nsA, dotA.Name, "hello from ada")
		Expect(err).NotTo(HaveOccurred())
		_, err = bob.Messages(suiteCtx, nsA, dotA.Name, wire.MessagesQuery{})
		Expect(err).NotTo(HaveOccurred())
		_, err = bob.PostMessage(suiteCtx, nsA, dotA.Name, "hello from bob")
		expectRefused(err, http.StatusForbidden, wire.CodeForbidden)
		_, err = ada.Messages(suiteCtx, nsB, dotB.Name, wire.MessagesQuery{})
		expectRefused(err, http.StatusForbidden, wire.CodeForbidden)
		By("a viewer reads which channels the server runs; linking one and pairing are an editor's")
		kinds, err := bob.ChannelKinds(suiteCtx, nsA, dotA.Name)
		Expect(err).NotTo(HaveOccurred())
		Expect(kinds.Available).To(ConsistOf(
			wire.ChannelKind{Type: "telegram", Name: "Telegram", LinkedBy: "token"},
			wire.ChannelKind{Type: "whatsapp", Name: "WhatsApp", LinkedBy: "code"}))
		_, err = bob.AddChannel(suiteCtx, nsA, dotA.Name, wire.ChannelAdd{Type: "telegram", Token: "1:x"})
		expectRefused(err, http.StatusForbidden, wire.CodeForbidden)
		_, err = bob.PairingCode(suiteCtx, nsA, dotA.Name, dotA.Name+"-telegram")
		expectRefused(err, http.StatusForbidden, wire.CodeForbidden)
		_, err = ada.AddChannel(suiteCtx, nsA, dotA.Name, wire.ChannelAdd{Type: "telegram", Token: "1:not-the-fakes"})
		expectRefused(err, http.StatusBadRequest, wire.CodeInvalidCredentials)

		_, _, err = controlplane.AddUser(suiteCtx, *admin, "cy", nsA, "owner", time.Hour)
		Expect(err).To(MatchError(ContainSubstring(`role "owner" is neither editor nor viewer`)))
		_, _, err = controlplane.AddUser(suiteCtx, *admin, "Cy_1", nsA, "editor", time.Hour)
		Expect(err).To(MatchError(ContainSubstring(`user name "Cy_1"`)))
	})

	It("revokes a person deleted with their ServiceAccount: new requests, open streams and the RoleBinding", func() {
		admin, err := clientcmd.LoadFromFile(cp.KubeconfigPath)
		Expect(err).NotTo(HaveOccurred())
		data, _, err := controlplane.AddUser(suiteCtx, *admin, "dee", nsA, "viewer", time.Hour)
		Expect(err).NotTo(HaveOccurred())
		cfg, err := clientcmd.RESTConfigFromKubeConfig(data)
		Expect(err).NotTo(HaveOccurred())
		dee, err := dotsclient.New(cfg)
		Expect(err).NotTo(HaveOccurred())
		ctx, cancel := context.WithCancel(suiteCtx)
		defer cancel()
		_, errs := dee.Stream(ctx, dotsclient.StreamOptions{Namespace: nsA, Dot: dotA.Name, Retry: 200 * time.Millisecond})
		Consistently(errs, "1s").ShouldNot(Receive(), "the stream runs while the account exists")

		Expect(cs.CoreV1().ServiceAccounts(nsA).Delete(suiteCtx, "dee", metav1.DeleteOptions{})).To(Succeed())
		By("ending the open stream within a keep-alive; connecting again is refused")
		var streamErr error
		Eventually(errs, "40s").Should(Receive(&streamErr))
		Expect(dotsclient.StatusOf(streamErr)).To(Equal(http.StatusUnauthorized), "%v", streamErr)
		By("deleting the account's RoleBinding with it")
		Eventually(func() bool {
			_, err := cs.RbacV1().RoleBindings(nsA).Get(suiteCtx, "dots-viewer-dee", metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		}, "20s").Should(BeTrue(), "the RoleBinding outlived its account")
	})

	It("lets a host agent ingest its own host's Dot's events, once each, and refuses another host's", func() {
		own := hostAgent(host)
		other := hostAgent("dotsapi-elsewhere")
		batch := []protocol.OutboundEvent{
			{Seq: 1, ID: "e1", Type: protocol.EventAgentState, TS: "2026-08-01T10:00:00Z", Data: json.RawMessage(`{"state":"THINKING"}`)},
			{Seq: 2, ID: "e2", Type: protocol.EventMessageAssistant, TS: "2026-08-01T10:00:01Z", Data: json.RawMessage(`{"text":"booked"}`)},
		}

		got, err := own.IngestEvents(suiteCtx, host, nsA, dotA.Name, string(dotA.UID), batch)
		Expect(err).NotTo(HaveOccurred())
		Expect(got).To(Equal(wire.Ingested{Stored: 2, Cursor: 2}))

		By("storing nothing twice when the batch is sent again")
		got, err = own.IngestEvents(suiteCtx, host, nsA, dotA.Name, string(dotA.UID), batch)
		Expect(err).NotTo(HaveOccurred())
		Expect(got).To(Equal(wire.Ingested{Stored: 0, Cursor: 2}))
		events, err := store.New(cp.DB.Pool()).Events(suiteCtx, store.EventQuery{DotUID: string(dotA.UID), Limit: 100})
		Expect(err).NotTo(HaveOccurred())
		var seqs []string
		for _, e := range events {
			if e.Source == store.SourceGuest {
				seqs = append(seqs, fmt.Sprintf("%d %s", *e.GuestSeq, e.Type))
			}
		}
		Expect(seqs).To(Equal([]string{"1 agent.state", "2 message.assistant"}))

		By("refusing another host's agent, whether it names this host or its own")
		_, err = other.IngestEvents(suiteCtx, host, nsA, dotA.Name, string(dotA.UID), batch)
		expectRefused(err, http.StatusForbidden, wire.CodeForbidden)
		_, err = other.IngestEvents(suiteCtx, "dotsapi-elsewhere", nsA, dotA.Name, string(dotA.UID), batch)
		expectRefused(err, http.StatusForbidden, wire.CodeForbidden)
		_, err = other.Outbox(suiteCtx, host, nsA, dotA.Name)
		expectRefused(err, http.StatusForbidden, wire.CodeForbidden)

		By("reading the outbox with the same credential")
		out, err := own.Outbox(suiteCtx, host, nsA, dotA.Name)
		Expect(err).NotTo(HaveOccurred())
		Expect(out.DotUID).To(Equal(string(dotA.UID)))
	})
})
