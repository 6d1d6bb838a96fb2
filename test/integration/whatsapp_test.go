package integration

import (
	"encoding/json"
	"regexp"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/controllers"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/channels/port"
	"github.com/invisible-dots/invisible-dots/internal/channels/port/porttest"
	dotsclient "github.com/invisible-dots/invisible-dots/internal/dotsapi/client"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
)

// waSession is the fake WhatsApp program's side of one session: it
// answers every send with a result, and hands the test what was sent.
type waSession struct {
	s    *porttest.FakeSession
	sent chan port.Frame
	keys chan port.Frame
}

func (w *waSession) pump() {
	defer GinkgoRecover()
	for {
		var f port.Frame
		select {
		case f = <-w.s.Frames():
		case <-w.s.Done():
			return
		}
		switch f.Type {
		case port.TypeSend, port.TypeEdit, port.TypeTyping:
			w.s.Send(GinkgoT(), port.Frame{Type: port.TypeResult, ID: f.ID, Ref: "wa-" + time.Now().Format("150405.000000")})
			if f.Type != port.TypeTyping {
				w.sent <- f
			}
		case port.TypeAck, port.TypeNack:
			w.keys <- f
		case port.TypeDrop:
			return
		}
	}
}

// said waits for a send to chat whose text matches.
func (w *waSession) said(chat string, match func(string) bool) port.Frame {
	GinkgoHelper()
	var got port.Frame
	Eventually(func() bool {
		for {
			select {
			case f := <-w.sent:
				if f.Chat == chat && match(f.Text) {
					got = f
					return true
				}
			default:
				return false
			}
		}
	}).Should(BeTrue(), "a send to %s", chat)
	return got
}

var _ = Describe("A Dot's WhatsApp channel (the program's side faked)", func() {
	It("links by a code streamed to the person, keeps the device's keys in the Channel's Secret, pairs, talks and takes approvals in words", func() {
		dot, id, guest, dc := channelDot()
		ns := dot.Namespace
		var err error

		By("adding WhatsApp takes no token and makes the Channel; the link streams its codes, then linked")
		_, err = dc.AddChannel(suiteCtx, ns, dot.Name, wire.ChannelAdd{Type: "whatsapp", Token: "no"})
		Expect(dotsclient.CodeOf(err)).To(Equal(wire.CodeInvalidRequest), "%v", err)
		linked, err := dc.AddChannel(suiteCtx, ns, dot.Name, wire.ChannelAdd{Type: "whatsapp"})
		Expect(err).NotTo(HaveOccurred())
		key := types.NamespacedName{Namespace: ns, Name: linked.Name}
		frames := make(chan wire.ChannelLinkFrame, 16)
		streamed := make(chan error, 1)
		go func() {
			streamed <- dc.LinkChannel(suiteCtx, ns, dot.Name, linked.Name, func(f wire.ChannelLinkFrame) { frames <- f })
		}()
		s := fakeWhatsApp.Accept(GinkgoT())
		Expect(s.Hello.Keys).To(BeEmpty(), "a new device has no keys")
		s.Send(GinkgoT(), port.Frame{Type: port.TypeCode, Code: "2@the-first-code"})
		Eventually(frames).Should(Receive(Equal(wire.ChannelLinkFrame{Code: "2@the-first-code"})))
		account := &port.Account{ID: "15550001", Name: "+15550001"}
		s.Send(GinkgoT(), port.Frame{Type: port.TypeLinked, Account: account})
		Eventually(frames).Should(Receive(Equal(wire.ChannelLinkFrame{Linked: "+15550001"})))
		Eventually(streamed).Should(Receive(BeNil()))

		By("the device's keys are written to the Channel's Secret before they are acknowledged")
		s.Send(GinkgoT(), port.Frame{Type: port.TypeKeys, ID: 1, Changes: []port.KeyChange{{Group: "identity", Key: "me", Value: []byte("secret-identity")}}})
		w := &waSession{s: s, sent: make(chan port.Frame, 64), keys: make(chan port.Frame, 8)}
		go w.pump()
		Eventually(w.keys).Should(Receive(HaveField("Type", port.TypeAck)))
		sec := &corev1.Secret{}
		Expect(k8sClient.Get(suiteCtx, types.NamespacedName{Namespace: ns, Name: dotsv1.ChannelDeviceSecretName(linked.Name)}, sec)).To(Succeed())
		Expect(string(sec.Data["device.json"])).To(ContainSubstring(`"identity"`))
		ch := &dotsv1.Channel{}
		Expect(k8sClient.Get(suiteCtx, key, ch)).To(Succeed())
		Expect(metav1.IsControlledBy(sec, ch)).To(BeTrue())
		s.Send(GinkgoT(), port.Frame{Type: port.TypeConnected, Account: account})
		Eventually(func(g Gomega) {
			g.Expect(k8sClient.Get(suiteCtx, key, ch)).To(Succeed())
			g.Expect(ch.Status.State).To(Equal(dotsv1.ChannelConnected))
			g.Expect(ch.Status.Account).To(Equal(&dotsv1.ChannelAccount{ID: "15550001", Name: "+15550001"}))
		}).Should(Succeed())

		By("a stranger is never answered; the words of a code pair a person")
		message := func(id uint64, peer, text string) {
			s.Send(GinkgoT(), port.Frame{Type: port.TypeMessage, ID: id, Message: &port.Message{
				Peer: peer, Chat: peer + "@s.whatsapp.net", ExternalID: "15550001:" + text[:min(len(text), 8)] + time.Now().Format(".000000"), Text: text, HasText: true, Label: "Bea"}})
		}
		message(1, "4477", "hello?")
		code, err := dc.PairingCode(suiteCtx, ns, dot.Name, linked.Name)
		Expect(err).NotTo(HaveOccurred())
		Expect(code.Words).To(Equal("pair " + code.Code))
		Expect(code.Link).To(Equal("https://wa.me/15550001?text=pair%20" + code.Code))
		message(2, "4488", code.Words)
		w.said("4488@s.whatsapp.net", func(t string) bool { return strings.HasPrefix(t, "Paired.") })
		Consistently(func() int { return len(w.sent) }, "300ms").Should(BeZero(), "the stranger got nothing")

		By("a bare yes is a message to the Dot; an approval asked is answered by its words")
		message(3, "4488", "yes")
		guest.says(protocol.EventApprovalRequested, protocol.ApprovalRequested{ApprovalID: "req-wa-000123", Tool: "exec", Permission: "computer.exec",
			Arguments: json.RawMessage(`{"command":"ls"}`), Reason: "look around"})
		prompt := w.said("4488@s.whatsapp.net", func(t string) bool { return strings.Contains(t, "look around") })
		Expect(prompt.NoPreview).To(BeTrue())
		words := regexp.MustCompile(`"(yes ap-[0-9a-z]{6})"`).FindStringSubmatch(prompt.Text)
		Expect(words).NotTo(BeNil(), prompt.Text)
		Expect(words[1]).To(Equal("yes ap-000123"))
		message(4, "4488", words[1])
		w.said("4488@s.whatsapp.net", func(t string) bool { return t == "Approved." })
		Eventually(func() dotsv1.ApprovalDecision { return approvalFor(dot, "req-wa-000123").Spec.Decision }).Should(Equal(dotsv1.Approve))
		events, err := logStore.EventsAfter(suiteCtx, id.UID, 0, 1000)
		Expect(err).NotTo(HaveOccurred())
		var texts []string
		for _, e := range events {
			if e.Type == wire.EventMessageUser {
				var m wire.MessageUser
				Expect(json.Unmarshal(e.Data, &m)).To(Succeed())
				texts = append(texts, m.Text)
			}
		}
		Expect(texts).To(Equal([]string{"yes"}), "the bare yes reached the Dot, the answer in words did not")

		By("removed, the Channel's keys go, and the session still open cannot write them back")
		Expect(k8sClient.Delete(suiteCtx, ch)).To(Succeed())
		Eventually(func() bool { return apierrors.IsNotFound(k8sClient.Get(suiteCtx, key, &dotsv1.Channel{})) }).Should(BeTrue())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8sClient.Get(suiteCtx, types.NamespacedName{Namespace: ns, Name: dotsv1.ChannelDeviceSecretName(linked.Name)}, &corev1.Secret{}))
		}, "30s").Should(BeTrue(), "the keys' Secret goes with its Channel")
		keys := &controllers.ChannelKeys{Client: k8sClient, Reader: k8sClient, Namespace: ns, Name: linked.Name, UID: string(ch.UID)}
		Expect(keys.Save(suiteCtx, []port.KeyChange{{Group: "identity", Key: "me", Value: []byte("late")}})).To(MatchError(port.ErrChannelGone))
		Expect(k8sClient.Get(suiteCtx, types.NamespacedName{Namespace: ns, Name: dotsv1.ChannelDeviceSecretName(linked.Name)}, &corev1.Secret{})).NotTo(Succeed())
	})
})
