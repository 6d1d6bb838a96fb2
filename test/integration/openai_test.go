package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
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

// openAIConn is what a program needs to reach the endpoint as a person:
// the base URL (.../v1/), the person's token and an HTTP client trusting
// the kubeconfig's CA.
type openAIConn struct {
	base, token string
	hc          *http.Client
}

// openAIPersonConn makes a person with `invisible-dots user add`'s
// credential (controlplane.AddUser) and returns how a program reaches the
// server's /v1 as that person, trusting the kubeconfig's CA, as the README
// tells a person to.
func openAIPersonConn(ns, name, role string) openAIConn {
	GinkgoHelper()
	admin, err := clientcmd.LoadFromFile(cp.KubeconfigPath)
	Expect(err).NotTo(HaveOccurred())
	kubeconfig, _, err := controlplane.AddUser(suiteCtx, *admin, name, ns, role, time.Hour)
	Expect(err).NotTo(HaveOccurred())
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	Expect(err).NotTo(HaveOccurred())
	Expect(cfg.BearerToken).NotTo(BeEmpty())
	// The TLS of the kubeconfig alone: the caller sends the key itself.
	hc, err := rest.HTTPClientFor(rest.AnonymousClientConfig(cfg))
	Expect(err).NotTo(HaveOccurred())
	return openAIConn{base: cfg.Host + "/v1/", token: cfg.BearerToken, hc: hc}
}

// client is the official OpenAI Go client with the person's token as its
// key.
func (c openAIConn) client() openai.Client {
	return openai.NewClient(option.WithBaseURL(c.base), option.WithAPIKey(c.token), option.WithHTTPClient(c.hc))
}

// openAIPerson is openAIPersonConn's official OpenAI Go client.
func openAIPerson(ns, name, role string) openai.Client {
	GinkgoHelper()
	return openAIPersonConn(ns, name, role).client()
}

// expectOpenAIError checks an OpenAI error answer's status and code.
func expectOpenAIError(err error, status int, code string) {
	GinkgoHelper()
	var apiErr *openai.Error
	Expect(errors.As(err, &apiErr)).To(BeTrue(), "not an OpenAI error answer: %v", err)
	Expect(apiErr.StatusCode).To(Equal(status), "%s", apiErr.RawJSON())
	Expect(apiErr.Code).To(Equal(code), "%s", apiErr.RawJSON())
	Expect(apiErr.Message).NotTo(BeEmpty())
}

// fakeDot answers the person's messages of a Dot in its log as the event
// pump writes a guest's answer: a message.assistant naming the message,
// with a spend. A message that says "delete" is answered with a chat
// approval request instead, one that says "quiet" not at all. It keeps when each answer was committed.
type fakeDot struct {
	dot       store.Dot
	seq       atomic.Int64
	mu        sync.Mutex
	committed map[string]time.Time // by the answer's text
}

const (
	fakeDotSpentUSD        = 0.0123
	fakeDotReasoningTokens = 7
)

func answerMessages(d *dotsv1.Dot) *fakeDot {
	GinkgoHelper()
	f := &fakeDot{dot: store.Dot{Namespace: d.Namespace, Name: d.Name, UID: string(d.UID)}, committed: map[string]time.Time{}}
	admin, err := dotsclient.New(cp.Config)
	Expect(err).NotTo(HaveOccurred())
	last, err := logStore.LastEventID(suiteCtx)
	Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithCancel(suiteCtx)
	events, errs := admin.Stream(ctx, dotsclient.StreamOptions{Namespace: d.Namespace, Dot: d.Name, Types: []string{wire.EventMessageUser}, After: &last})
	done := make(chan struct{})
	go func() {
		defer GinkgoRecover()
		defer close(done)
		for e := range events {
			var m wire.MessageUser
			Expect(json.Unmarshal(e.Data, &m)).To(Succeed())
			if strings.Contains(m.Text, "quiet") {
				continue
			}
			if strings.Contains(m.Text, "delete") {
				f.says(protocol.EventApprovalRequested, protocol.ApprovalRequested{ApprovalID: fmt.Sprintf("chat-%d", e.ID), Tool: "exec",
					Permission: "computer.exec", Arguments: json.RawMessage(`{"command":"rm -rf build"}`), Reason: "clean the build"})
				continue
			}
			text := "echo: " + m.Text
			f.says(protocol.EventMessageAssistant, protocol.MessageAssistant{Text: text, InReplyTo: ptr.To(wire.MessageID(e.ID)),
				SpentUSD: ptr.To(fakeDotSpentUSD), ReasoningTokens: ptr.To(int64(fakeDotReasoningTokens))})
			committed := time.Now()
			f.mu.Lock()
			f.committed[text] = committed
			f.mu.Unlock()
		}
		<-errs
	}()
	DeferCleanup(func() { cancel(); <-done })
	return f
}

func (f *fakeDot) says(typ string, data any) {
	raw, err := json.Marshal(data)
	Expect(err).NotTo(HaveOccurred())
	seq := f.seq.Add(1)
	_, err = logStore.AppendEvents(suiteCtx, store.Event{Dot: f.dot, Type: typ, Source: store.SourceGuest, GuestSeq: &seq, Data: raw})
	Expect(err).NotTo(HaveOccurred())
}

// committedAt is when the answer text was committed, once the answering
// goroutine noted it (the client may hear of it first).
func (f *fakeDot) committedAt(text string) time.Time {
	GinkgoHelper()
	var at time.Time
	Eventually(func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		at = f.committed[text]
		return !at.IsZero()
	}).Should(BeTrue(), "no answer %q was committed", text)
	return at
}

var _ = Describe("The OpenAI-compatible endpoint", Ordered, func() {
	var (
		nsA, nsB       string
		dotA, dotB     *dotsv1.Dot
		modelA, modelB string
		editor, viewer openai.Client
		editorConn     openAIConn
		answers        *fakeDot
	)

	BeforeAll(func() {
		nsA, nsB = newNamespace("openai-a"), newNamespace("openai-b")
		dotA, dotB = createDot(nsA), createDot(nsB)
		modelA, modelB = nsA+"/"+dotA.Name, nsB+"/"+dotB.Name
		editorConn = openAIPersonConn(nsA, "ada", "editor")
		editor = editorConn.client()
		viewer = openAIPerson(nsA, "vic", "viewer")
		answers = answerMessages(dotA)
	})

	It("lists the Dots a person may chat with as models, and nothing of another namespace", func() {
		page, err := editor.Models.List(suiteCtx)
		Expect(err).NotTo(HaveOccurred())
		var ids []string
		for _, m := range page.Data {
			ids = append(ids, m.ID)
			Expect(m.Object).To(BeEquivalentTo("model"))
			Expect(m.OwnedBy).To(Equal(nsA))
		}
		Expect(ids).To(Equal([]string{modelA}))

		got, err := editor.Models.Get(suiteCtx, modelA)
		Expect(err).NotTo(HaveOccurred())
		Expect(got.ID).To(Equal(modelA))

		By("not finding another namespace's Dot, as a Dot that does not exist")
		_, err = editor.Models.Get(suiteCtx, modelB)
		expectOpenAIError(err, http.StatusNotFound, wire.OpenAICodeModelNotFound)
		_, err = editor.Models.Get(suiteCtx, nsA+"/no-such-dot")
		expectOpenAIError(err, http.StatusNotFound, wire.OpenAICodeModelNotFound)

		By("listing nothing to a viewer, who may not chat")
		page, err = viewer.Models.List(suiteCtx)
		Expect(err).NotTo(HaveOccurred())
		Expect(page.Data).To(BeEmpty())
	})

	It("says the newest user message to the Dot and answers with its reply, whole, with its spend as usage", func() {
		before, err := logStore.LastEventID(suiteCtx)
		Expect(err).NotTo(HaveOccurred())
		resp, err := editor.Chat.Completions.New(suiteCtx, openai.ChatCompletionNewParams{
			Model: modelA,
			Messages: []openai.ChatCompletionMessageParamUnion{
				openai.SystemMessage("be brief"),
				openai.UserMessage("an old question"),
				openai.AssistantMessage("an old answer"),
				openai.UserMessage([]openai.ChatCompletionContentPartUnionParam{openai.TextContentPart("book the 9:40 train"), openai.TextContentPart("to Lyon")}),
			},
			Temperature: openai.Float(0.2),
		})
		Expect(err).NotTo(HaveOccurred())
		Expect(resp.Model).To(Equal(modelA))
		Expect(resp.ID).To(HavePrefix("chatcmpl-"))
		Expect(resp.Choices).To(HaveLen(1))
		Expect(resp.Choices[0].Message.Content).To(Equal("echo: book the 9:40 train\nto Lyon"))
		Expect(resp.Choices[0].FinishReason).To(Equal("stop"))
		Expect(resp.Usage.CompletionTokensDetails.ReasoningTokens).To(BeEquivalentTo(fakeDotReasoningTokens))
		var usage struct {
			Cost float64 `json:"cost"`
		}
		Expect(json.Unmarshal([]byte(resp.Usage.RawJSON()), &usage)).To(Succeed())
		Expect(usage.Cost).To(Equal(fakeDotSpentUSD))

		By("having said the newest user message alone: the Dot keeps its own thread")
		said, err := logStore.Events(suiteCtx, store.EventQuery{DotUID: string(dotA.UID), Types: []string{wire.EventMessageUser}, After: before, Limit: 10})
		Expect(err).NotTo(HaveOccurred())
		Expect(said).To(HaveLen(1))
		Expect(string(said[0].Data)).To(ContainSubstring("book the 9:40 train"))
		Expect(resp.ID).To(Equal(fmt.Sprintf("chatcmpl-%d", said[0].ID)))
	})

	It("streams the Dot's reply as OpenAI's chunks, usage last, to [DONE]", func() {
		stream := editor.Chat.Completions.NewStreaming(suiteCtx, openai.ChatCompletionNewParams{
			Model:         modelA,
			Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("what is on today?")},
			StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
		})
		acc := openai.ChatCompletionAccumulator{}
		var chunks int
		var finished string
		for stream.Next() {
			chunk := stream.Current()
			chunks++
			Expect(chunk.Model).To(Equal(modelA))
			Expect(acc.AddChunk(chunk)).To(BeTrue())
			if c, ok := acc.JustFinishedContent(); ok {
				finished = c
			}
		}
		Expect(stream.Err()).NotTo(HaveOccurred())
		Expect(stream.Close()).To(Succeed())
		Expect(chunks).To(Equal(4), "role, content, finish and usage")
		Expect(acc.Choices).To(HaveLen(1))
		Expect(acc.Choices[0].Message.Content).To(Equal("echo: what is on today?"))
		Expect(finished).To(Equal("echo: what is on today?"))
		Expect(acc.Usage.CompletionTokensDetails.ReasoningTokens).To(BeEquivalentTo(fakeDotReasoningTokens))
	})

	It("speaks OpenAI's wire to a program that parses it itself: server-sent chunks ending in data: [DONE], or one object", func() {
		post := func(body string) (*http.Response, []byte) {
			GinkgoHelper()
			req, err := http.NewRequestWithContext(suiteCtx, http.MethodPost, editorConn.base+"chat/completions", strings.NewReader(body))
			Expect(err).NotTo(HaveOccurred())
			req.Header.Set("Authorization", "Bearer "+editorConn.token)
			req.Header.Set("Content-Type", "application/json")
			resp, err := editorConn.hc.Do(req)
			Expect(err).NotTo(HaveOccurred())
			defer resp.Body.Close()
			out, err := io.ReadAll(resp.Body)
			Expect(err).NotTo(HaveOccurred())
			return resp, out
		}
		type chunk struct {
			ID      string `json:"id"`
			Object  string `json:"object"`
			Model   string `json:"model"`
			Choices []struct {
				Delta struct {
					Role    string `json:"role"`
					Content string `json:"content"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
			Usage *struct {
				Cost float64 `json:"cost"`
			} `json:"usage"`
		}

		resp, out := post(`{"model":"` + modelA + `","stream":true,"stream_options":{"include_usage":true},` +
			`"messages":[{"role":"user","content":"on the wire"}]}`)
		Expect(resp.StatusCode).To(Equal(http.StatusOK), string(out))
		Expect(resp.Header.Get("Content-Type")).To(HavePrefix("text/event-stream"))
		Expect(string(out)).To(HaveSuffix("data: [DONE]\n\n"))
		var (
			text, role, finish string
			ids                = map[string]bool{}
			usage              float64
			sawUsage           bool
		)
		events := strings.Split(strings.TrimSuffix(string(out), "\n\n"), "\n\n")
		Expect(events[len(events)-1]).To(Equal("data: [DONE]"))
		for _, ev := range events[:len(events)-1] {
			if strings.HasPrefix(ev, ":") {
				continue // a keep-alive comment while the Dot works
			}
			data, ok := strings.CutPrefix(ev, "data: ")
			Expect(ok).To(BeTrue(), "an event that is not data: %q", ev)
			var c chunk
			Expect(json.Unmarshal([]byte(data), &c)).To(Succeed(), data)
			Expect(c.Object).To(Equal("chat.completion.chunk"))
			Expect(c.Model).To(Equal(modelA))
			ids[c.ID] = true
			for _, ch := range c.Choices {
				role += ch.Delta.Role
				text += ch.Delta.Content
				if ch.FinishReason != nil {
					finish = *ch.FinishReason
				}
			}
			if c.Usage != nil {
				Expect(c.Choices).To(BeEmpty(), "usage comes in a chunk of its own")
				usage, sawUsage = c.Usage.Cost, true
			}
		}
		Expect(ids).To(HaveLen(1), "every chunk of a completion has its id")
		Expect(role).To(Equal("assistant"))
		Expect(text).To(Equal("echo: on the wire"))
		Expect(finish).To(Equal("stop"))
		Expect(sawUsage).To(BeTrue())
		Expect(usage).To(Equal(fakeDotSpentUSD))

		By("whole: one chat.completion object")
		resp, out = post(`{"model":"` + modelA + `","messages":[{"role":"user","content":"in one piece"}]}`)
		Expect(resp.StatusCode).To(Equal(http.StatusOK), string(out))
		Expect(resp.Header.Get("Content-Type")).To(HavePrefix("application/json"))
		var whole struct {
			Object  string `json:"object"`
			Choices []struct {
				Message struct {
					Role    string `json:"role"`
					Content string `json:"content"`
				} `json:"message"`
			} `json:"choices"`
		}
		Expect(json.Unmarshal(out, &whole)).To(Succeed(), string(out))
		Expect(whole.Object).To(Equal("chat.completion"))
		Expect(whole.Choices).To(HaveLen(1))
		Expect(whole.Choices[0].Message.Role).To(Equal("assistant"))
		Expect(whole.Choices[0].Message.Content).To(Equal("echo: in one piece"))
	})

	It("refuses a viewer, another namespace's Dot, and what is not text, in OpenAI's shape", func() {
		user := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")}
		_, err := viewer.Chat.Completions.New(suiteCtx, openai.ChatCompletionNewParams{Model: modelA, Messages: user})
		expectOpenAIError(err, http.StatusForbidden, wire.CodeForbidden)
		_, err = editor.Chat.Completions.New(suiteCtx, openai.ChatCompletionNewParams{Model: modelB, Messages: user})
		expectOpenAIError(err, http.StatusNotFound, wire.OpenAICodeModelNotFound)
		_, err = editor.Chat.Completions.New(suiteCtx, openai.ChatCompletionNewParams{Model: "gpt-4o", Messages: user})
		expectOpenAIError(err, http.StatusNotFound, wire.OpenAICodeModelNotFound)
		_, err = editor.Chat.Completions.New(suiteCtx, openai.ChatCompletionNewParams{Model: modelA, Messages: []openai.ChatCompletionMessageParamUnion{
			openai.UserMessage([]openai.ChatCompletionContentPartUnionParam{
				openai.TextContentPart("what is this?"),
				openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{URL: "https://example.com/a.png"}),
			}),
		}})
		expectOpenAIError(err, http.StatusBadRequest, wire.OpenAICodeUnsupportedContent)
		var apiErr *openai.Error
		Expect(errors.As(err, &apiErr)).To(BeTrue())
		Expect(apiErr.Param).To(Equal("messages[0].content[1]"))
		_, err = editor.Chat.Completions.New(suiteCtx, openai.ChatCompletionNewParams{Model: modelA, Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("only rules")}})
		expectOpenAIError(err, http.StatusBadRequest, wire.OpenAICodeNoUserMessage)
	})

	It("measures its overhead above the Dot's own answer: from the answer's commit to the client", func() {
		const turns = 100
		var whole, streamed []time.Duration
		for i := range turns {
			text := fmt.Sprintf("turn %d", i)
			resp, err := editor.Chat.Completions.New(suiteCtx, openai.ChatCompletionNewParams{
				Model: modelA, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(text)},
			})
			got := time.Now()
			Expect(err).NotTo(HaveOccurred())
			Expect(resp.Choices[0].Message.Content).To(Equal("echo: " + text))
			whole = append(whole, got.Sub(answers.committedAt("echo: "+text)))

			text = fmt.Sprintf("streamed turn %d", i)
			stream := editor.Chat.Completions.NewStreaming(suiteCtx, openai.ChatCompletionNewParams{
				Model: modelA, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(text)},
			})
			var at time.Time
			for stream.Next() {
				if c := stream.Current(); at.IsZero() && len(c.Choices) > 0 && c.Choices[0].Delta.Content != "" {
					at = time.Now()
				}
			}
			Expect(stream.Err()).NotTo(HaveOccurred())
			streamed = append(streamed, at.Sub(answers.committedAt("echo: "+text)))
		}
		// Timings are reported, never asserted (DESIGN.md 7).
		AddReportEntry("OpenAI endpoint overhead above the Dot's answer (commit to client)",
			fmt.Sprintf("whole: %s; streamed: %s (%d turns each)", percentiles(whole), percentiles(streamed), turns), ReportEntryVisibilityAlways)
	})
	It("answers, rather than hangs, when the Dot waits for an approval: which, and where to answer it", func() {
		resp, err := editor.Chat.Completions.New(suiteCtx, openai.ChatCompletionNewParams{
			Model: modelA, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("delete the build")},
		})
		Expect(err).NotTo(HaveOccurred())
		said := strings.TrimPrefix(resp.ID, "chatcmpl-")
		name := dotsv1.ApprovalName(dotA.Name, "chat-"+said)
		text := resp.Choices[0].Message.Content
		Expect(text).To(ContainSubstring("waits for an approval"))
		Expect(text).To(ContainSubstring(name))
		Expect(text).To(ContainSubstring("invisible-dots approve"))
		Expect(text).To(ContainSubstring("clean the build"))

		By("streamed too")
		stream := editor.Chat.Completions.NewStreaming(suiteCtx, openai.ChatCompletionNewParams{
			Model: modelA, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("delete the logs")},
		})
		acc := openai.ChatCompletionAccumulator{}
		for stream.Next() {
			acc.AddChunk(stream.Current())
		}
		Expect(stream.Err()).NotTo(HaveOccurred())
		Expect(acc.Choices[0].Message.Content).To(ContainSubstring("waits for an approval"))

		By("saying at once that a Dot waits for an approval already, naming one")
		// The endpoint reads the Dot's count and then its Approvals, which
		// are made from the log a moment after the count: both first.
		Eventually(func(g Gomega) {
			d := &dotsv1.Dot{}
			g.Expect(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(dotA), d)).To(Succeed())
			g.Expect(d.Status.PendingApprovals).To(BeNumerically(">=", 1))
			var list dotsv1.ApprovalList
			g.Expect(k8sClient.List(suiteCtx, &list, client.InNamespace(dotA.Namespace), client.MatchingLabels{dotsv1.DotLabel: dotA.Name})).To(Succeed())
			g.Expect(list.Items).To(ContainElement(HaveField("Spec.Decision", BeEmpty())))
		}).Should(Succeed())
		// The fake Dot leaves a quiet message unanswered: the answer is the
		// approval's. Bounded, so a wait for an answer that never comes
		// fails here rather than at the suite's timeout.
		quiet, cancelQuiet := context.WithTimeout(suiteCtx, 30*time.Second)
		defer cancelQuiet()
		resp, err = editor.Chat.Completions.New(quiet, openai.ChatCompletionNewParams{
			Model: modelA, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("a quiet hello")},
		})
		Expect(err).NotTo(HaveOccurred())
		Expect(resp.Choices[0].Message.Content).To(ContainSubstring("waits for an approval"))
		Expect(resp.Choices[0].Message.Content).To(ContainSubstring("invisible-dots approve " + dotA.Name + "-"))
	})
})

// percentiles says the p50 and p99 of ds.
func percentiles(ds []time.Duration) string {
	s := slices.Clone(ds)
	slices.Sort(s)
	at := func(p float64) time.Duration { return s[min(len(s)-1, int(p*float64(len(s))))] }
	return fmt.Sprintf("p50 %s, p99 %s, max %s", at(0.50).Round(10*time.Microsecond), at(0.99).Round(10*time.Microsecond), s[len(s)-1].Round(10*time.Microsecond))
}
