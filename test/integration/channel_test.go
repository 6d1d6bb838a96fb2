package integration

import (
	"context"
	"encoding/json"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/channels/telegram/telegramtest"
	dotsclient "github.com/invisible-dots/invisible-dots/internal/dotsapi/client"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
	"github.com/invisible-dots/invisible-dots/internal/store"
)

// telegramToken is the fake Bot API's bot (id:secret, as @BotFather gives).
const telegramToken = "777001:AAE-the-bots-secret-Token_x"

// sentTo are the fake's sendMessage calls to chat.
func sentTo(chat string) []telegramtest.Call {
	var out []telegramtest.Call
	for _, c := range fakeTelegram.Calls("sendMessage") {
		if c.Fields["chat_id"] == chat {
			out = append(out, c)
		}
	}
	return out
}

// textsOf are the calls' texts.
func textsOf(calls []telegramtest.Call) []string {
	var out []string
	for _, c := range calls {
		out = append(out, c.Field("text"))
	}
	return out
}

// notices are the notices the hub gave for presses, in order.
func notices() []string { return textsOf(fakeTelegram.Calls("answerCallbackQuery")) }

// channelDot is a Dot made for a channel's test (deleted after it), its
// log's name, its guest's voice and the admin's Dots API client.
func channelDot() (*dotsv1.Dot, store.Dot, *guestLog, *dotsclient.Client) {
	GinkgoHelper()
	dot := validDot()
	Expect(k8sClient.Create(suiteCtx, dot)).To(Succeed())
	DeferCleanup(func() { _ = k8sClient.Delete(context.Background(), dot) })
	id := store.Dot{Namespace: dot.Namespace, Name: dot.Name, UID: string(dot.UID)}
	dc, err := dotsclient.New(cp.Config)
	Expect(err).NotTo(HaveOccurred())
	return dot, id, &guestLog{dot: id}, dc
}

var _ = Describe("A Dot's Telegram channel", func() {
	It("pairs a phone, carries the conversation both ways, asks and takes approvals by button, and keeps the token out of sight", func() {
		dot, id, guest, dc := channelDot()
		ns := dot.Namespace
		var err error

		By("a token Telegram refuses is a 400 invalid_credentials that does not repeat it")
		_, err = dc.AddChannel(suiteCtx, ns, dot.Name, wire.ChannelAdd{Type: "telegram", Token: "777002:wrong-secret-zzz"})
		Expect(dotsclient.CodeOf(err)).To(Equal(wire.CodeInvalidCredentials), "%v", err)
		Expect(err.Error()).NotTo(ContainSubstring("wrong-secret-zzz"))
		_, err = dc.AddChannel(suiteCtx, ns, dot.Name, wire.ChannelAdd{Type: "signal"})
		Expect(dotsclient.CodeOf(err)).To(Equal(wire.CodeInvalidRequest), "%v", err)

		By("the bot's token: checked with getMe, kept in a Secret the Channel owns, and the link connects")
		linked, err := dc.AddChannel(suiteCtx, ns, dot.Name, wire.ChannelAdd{Type: "telegram", Token: telegramToken})
		Expect(err).NotTo(HaveOccurred())
		Expect(linked.Account.Name).To(Equal(fakeTelegram.Username))
		key := types.NamespacedName{Namespace: ns, Name: linked.Name}
		channelNow := func() *dotsv1.Channel {
			GinkgoHelper()
			ch := &dotsv1.Channel{}
			Expect(k8sClient.Get(suiteCtx, key, ch)).To(Succeed())
			return ch
		}
		Eventually(func() dotsv1.ChannelState { return channelNow().Status.State }).Should(Equal(dotsv1.ChannelConnected))
		ch := channelNow()
		Expect(ch.Finalizers).To(ContainElement(dotsv1.ChannelFinalizer))
		sec := &corev1.Secret{}
		Expect(k8sClient.Get(suiteCtx, types.NamespacedName{Namespace: ns, Name: ch.Spec.CredentialsSecretName}, sec)).To(Succeed())
		Expect(metav1.IsControlledBy(sec, ch)).To(BeTrue())
		Expect(fakeTelegram.Calls("deleteWebhook")).NotTo(BeEmpty(), "a webhook the bot had is deleted on connect")
		Expect(fakeTelegram.Calls("getUpdates")[0].Fields["allowed_updates"]).To(Equal(`["message","callback_query"]`))

		By("the same Dot twice is already_exists; another Dot on the same bot is account_in_use")
		_, err = dc.AddChannel(suiteCtx, ns, dot.Name, wire.ChannelAdd{Type: "telegram", Token: telegramToken})
		Expect(dotsclient.CodeOf(err)).To(Equal(wire.CodeAlreadyExists), "%v", err)
		other := validDot()
		Expect(k8sClient.Create(suiteCtx, other)).To(Succeed())
		DeferCleanup(func() { _ = k8sClient.Delete(context.Background(), other) })
		_, err = dc.AddChannel(suiteCtx, ns, other.Name, wire.ChannelAdd{Type: "telegram", Token: telegramToken})
		Expect(dotsclient.CodeOf(err)).To(Equal(wire.CodeAccountInUse), "%v", err)

		By("a stranger, a group and a bare /start get no answer and cost no row")
		sentBefore := len(fakeTelegram.Calls("sendMessage"))
		fakeTelegram.Say(99, "Stranger", "hello dot")
		fakeTelegram.SayInGroup(42, -1001, "hi all")
		fakeTelegram.Say(42, "Ada", "/start")
		Eventually(fakeTelegram.Pending).Should(BeZero(), "the updates were dealt with and confirmed")
		Consistently(func() int { return len(fakeTelegram.Calls("sendMessage")) }, "500ms").Should(Equal(sentBefore))
		userMessages := func() []store.Event {
			events, err := logStore.EventsAfter(suiteCtx, id.UID, 0, 1000)
			Expect(err).NotTo(HaveOccurred())
			var out []store.Event
			for _, e := range events {
				if e.Type == wire.EventMessageUser {
					out = append(out, e)
				}
			}
			return out
		}
		Expect(userMessages()).To(BeEmpty())

		By("a pairing code pairs Ada, by her user id, once")
		code, err := dc.PairingCode(suiteCtx, ns, dot.Name, linked.Name)
		Expect(err).NotTo(HaveOccurred())
		Expect(code.Words).To(Equal("/start " + code.Code))
		Expect(code.Link).To(Equal("https://t.me/" + fakeTelegram.Username + "?start=" + code.Code))
		fakeTelegram.Say(42, "Ada", code.Words)
		Eventually(func() []dotsv1.ChannelPerson { return channelNow().Status.People }).Should(ConsistOf(
			And(HaveField("ID", "42"), HaveField("Label", "Ada"), HaveField("Role", "owner"))))
		Eventually(func() []string { return textsOf(sentTo("42")) }).Should(ContainElement(HavePrefix("Paired.")))
		fakeTelegram.Say(43, "Eve", code.Words)
		Eventually(fakeTelegram.Pending).Should(BeZero())
		Consistently(func() int { return len(channelNow().Status.People) }, "500ms").Should(Equal(1), "a code works once")

		By("Ada's message reaches the Dot, via Telegram")
		fakeTelegram.Say(42, "Ada", "what is on my calendar?")
		Eventually(func() int { return len(userMessages()) }).Should(Equal(1))
		first := userMessages()[0]
		var said wire.MessageUser
		Expect(json.Unmarshal(first.Data, &said)).To(Succeed())
		Expect(said.Text).To(Equal("what is on my calendar?"))
		Expect(said.Origin).NotTo(BeNil())
		Expect(said.Origin.Channel).To(Equal("telegram"))
		Expect(said.Origin.ChatID).To(Equal("42"))

		By("the Dot's answer goes back to her chat, with no link preview")
		reply := wire.MessageID(first.ID)
		guest.says(protocol.EventMessageAssistant, protocol.MessageAssistant{Text: "Nothing today: https://example.com/cal", InReplyTo: &reply})
		Eventually(func() []string { return textsOf(sentTo("42")) }).Should(ContainElement("Nothing today: https://example.com/cal"))
		for _, c := range fakeTelegram.Calls("sendMessage") {
			Expect(c.Fields["link_preview_options"]).To(MatchJSON(`{"is_disabled":true}`), "no preview on any send: %v", c.Fields)
		}

		By("the Dot asks: Ada gets a prompt with the permission's risk, the reason, the arguments and two buttons")
		guest.says(protocol.EventApprovalRequested, protocol.ApprovalRequested{ApprovalID: "req-chat-1", Tool: "exec", Permission: "computer.exec",
			Arguments: json.RawMessage(`{"command":"rm -rf /tmp/x"}`), Reason: "clean up the build"})
		approvalFor(dot, "req-chat-1")
		promptOf := func(id string) telegramtest.Call {
			GinkgoHelper()
			var found telegramtest.Call
			Eventually(func() bool {
				for _, c := range sentTo("42") {
					if strings.Contains(c.Fields["reply_markup"], "ap1:y:"+id) {
						found = c
						return true
					}
				}
				return false
			}).Should(BeTrue(), "a prompt for %s", id)
			return found
		}
		prompt := promptOf("req-chat-1")
		Expect(prompt.Field("text")).To(And(ContainSubstring("Run commands (high risk)"), ContainSubstring("clean up the build"), ContainSubstring("rm -rf /tmp/x")))
		Expect(prompt.Fields["reply_markup"]).To(ContainSubstring("ap1:n:req-chat-1"))

		By("a forged button and a stranger's press decide nothing")
		fakeTelegram.Press(42, 1, "ap2:y:req-chat-1")
		fakeTelegram.Press(99, 1, "ap1:y:req-chat-1")
		Eventually(notices).Should(Equal([]string{"This button is out of date: answer in the web client.", "Only the Dot's owners answer its requests."}))
		Expect(approvalFor(dot, "req-chat-1").Spec.Decision).To(BeEmpty())

		By("Ada approves: the Approval's decision is written under her id, the prompt is edited, a second press is answered already")
		fakeTelegram.Press(42, 1, "ap1:y:req-chat-1")
		Eventually(func() dotsv1.ApprovalDecision { return approvalFor(dot, "req-chat-1").Spec.Decision }).Should(Equal(dotsv1.Approve))
		managers := []string{}
		for _, m := range approvalFor(dot, "req-chat-1").ManagedFields {
			managers = append(managers, m.Manager)
		}
		Expect(managers).To(ContainElement("invisible-dots-channel/telegram:42"))
		Eventually(notices).Should(HaveLen(3))
		Expect(notices()[2]).To(Equal("Approved."))
		editOf := func(text string) []string {
			var out []string
			for _, c := range fakeTelegram.Calls("editMessageText") {
				if strings.Contains(c.Field("text"), text) {
					out = append(out, c.Field("text"))
					Expect(c.Fields["link_preview_options"]).To(MatchJSON(`{"is_disabled":true}`), "no preview on any edit")
					Expect(c.Fields["reply_markup"]).NotTo(ContainSubstring("ap1:"), "the buttons are taken away")
				}
			}
			return out
		}
		Eventually(func() []string { return editOf("clean up the build") }).Should(ContainElement(HaveSuffix("\n\nApproved.")))
		fakeTelegram.Press(42, 1, "ap1:n:req-chat-1")
		Eventually(notices).Should(HaveLen(4))
		Expect(notices()[3]).To(Equal("It was answered already."))
		Expect(approvalFor(dot, "req-chat-1").Spec.Decision).To(Equal(dotsv1.Approve))

		By("answered in the web first: the prompt says so, and a press after it is answered already")
		guest.says(protocol.EventApprovalRequested, protocol.ApprovalRequested{ApprovalID: "req-chat-2", Tool: "write_file", Permission: "files.write",
			Arguments: json.RawMessage(`{"path":"notes.txt"}`), Reason: "keep notes"})
		asked := approvalFor(dot, "req-chat-2")
		promptOf("req-chat-2")
		_, err = dc.AnswerApproval(suiteCtx, ns, asked.Name, "reject", wire.ApprovalAnswer{})
		Expect(err).NotTo(HaveOccurred())
		Eventually(func() []string { return editOf("keep notes") }).Should(ContainElement(HaveSuffix("\n\nRejected.")))
		fakeTelegram.Press(42, 1, "ap1:y:req-chat-2")
		Eventually(notices).Should(HaveLen(5))
		Expect(notices()[4]).To(Equal("It was answered already."))

		By("a task's request whose task ended: No longer needed, and the owners hear the task's end")
		task := newTask(dot, dot.Name+"-chat-task", 0)
		Eventually(func() dotsv1.TaskPhase { return taskOf(task).Status.Phase }).Should(Equal(dotsv1.TaskRunning))
		tid := string(taskOf(task).UID)
		guest.says(protocol.EventTaskStarted, protocol.TaskStarted{TaskID: tid})
		guest.says(protocol.EventApprovalRequested, protocol.ApprovalRequested{ApprovalID: "req-task-1", TaskID: &tid, Tool: "exec", Permission: "computer.exec",
			Arguments: json.RawMessage(`{"command":"make deploy"}`), Reason: "ship it"})
		promptOf("req-task-1")
		guest.says(protocol.EventTaskFailed, protocol.TaskFailed{TaskID: tid, Error: "gave up waiting"})
		Eventually(func() []string { return editOf("ship it") }).Should(ContainElement(HaveSuffix("No longer needed: the task or the day it was for has ended.")))
		Eventually(func() []string { return textsOf(sentTo("42")) }).Should(ContainElement("Task failed: gave up waiting"))

		By("the token is in no event, no Channel, no Kubernetes Event")
		events, err := logStore.EventsAfter(suiteCtx, id.UID, 0, 1000)
		Expect(err).NotTo(HaveOccurred())
		secret := strings.SplitN(telegramToken, ":", 2)[1]
		for _, e := range events {
			Expect(string(e.Data)).NotTo(ContainSubstring(secret), e.Type)
		}
		raw, _ := json.Marshal(channelNow())
		Expect(string(raw)).NotTo(ContainSubstring(secret))
		var kevents corev1.EventList
		Expect(k8sClient.List(suiteCtx, &kevents, client.InNamespace(ns))).To(Succeed())
		for _, e := range kevents.Items {
			Expect(e.Message).NotTo(ContainSubstring(secret))
		}

		By("Telegram revokes the token: needs_relink; the token given again connects with Ada still paired")
		fakeTelegram.Revoke()
		Eventually(func() dotsv1.ChannelState { return channelNow().Status.State }, "20s").Should(Equal(dotsv1.ChannelNeedsRelink))
		Expect(channelNow().Status.Detail).NotTo(ContainSubstring(secret))
		fakeTelegram.Restore()
		_, err = dc.SetChannelCredentials(suiteCtx, ns, dot.Name, linked.Name, telegramToken)
		Expect(err).NotTo(HaveOccurred())
		Eventually(func() dotsv1.ChannelState { return channelNow().Status.State }, "20s").Should(Equal(dotsv1.ChannelConnected))
		Expect(channelNow().Status.People).To(HaveLen(1))

		By("unpaired, Ada is gone from its people; removed, the Channel's rows and its Secret go")
		Expect(dc.Unpair(suiteCtx, ns, dot.Name, linked.Name, "42")).To(Succeed())
		Eventually(func() int { return len(channelNow().Status.People) }).Should(BeZero())
		Expect(k8sClient.Delete(suiteCtx, channelNow())).To(Succeed())
		Eventually(func() bool { return apierrors.IsNotFound(k8sClient.Get(suiteCtx, key, &dotsv1.Channel{})) }).Should(BeTrue())
		peers, err := logStore.Peers(suiteCtx, string(ch.UID))
		Expect(err).NotTo(HaveOccurred())
		Expect(peers).To(BeEmpty())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8sClient.Get(suiteCtx, types.NamespacedName{Namespace: ns, Name: ch.Spec.CredentialsSecretName}, &corev1.Secret{}))
		}, "30s").Should(BeTrue(), "the Secret goes with its Channel")
	})
})

var _ = Describe("A Channel applied before its Dot", func() {
	It("waits with an error that names the Dot, and goes on once the Dot comes", func() {
		dot := validDot()
		ch := &dotsv1.Channel{
			ObjectMeta: metav1.ObjectMeta{Namespace: dot.Namespace, Name: dot.Name + "-telegram"},
			Spec:       dotsv1.ChannelSpec{DotName: dot.Name, Type: dotsv1.ChannelTelegram},
		}
		Expect(k8sClient.Create(suiteCtx, ch)).To(Succeed())
		DeferCleanup(func() { _ = k8sClient.Delete(context.Background(), ch) })
		key := client.ObjectKeyFromObject(ch)
		status := func() dotsv1.ChannelStatus {
			got := &dotsv1.Channel{}
			Expect(k8sClient.Get(suiteCtx, key, got)).To(Succeed())
			return got.Status
		}
		Eventually(status).Should(And(
			HaveField("State", dotsv1.ChannelError),
			HaveField("Detail", ContainSubstring("there is no Dot "+dot.Name))))

		By("the Dot comes: the Channel is reconciled again, with nothing else changed")
		Expect(k8sClient.Create(suiteCtx, dot)).To(Succeed())
		DeferCleanup(func() { _ = k8sClient.Delete(context.Background(), dot) })
		// Telegram's link takes a token, which this Channel was never given.
		Eventually(status).Should(And(
			HaveField("State", dotsv1.ChannelNeedsRelink),
			HaveField("Detail", ContainSubstring("names no credentials' Secret"))))
	})
})
