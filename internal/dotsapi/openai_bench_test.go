package dotsapi

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"k8s.io/utils/ptr"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/client"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
	"github.com/invisible-dots/invisible-dots/internal/store"
)

// BenchmarkOpenAIChat is the OpenAI-compatible endpoint's overhead above
// the Dot's own answer: the official OpenAI Go client chats with a Dot
// whose answers a stand-in writes into the log as the event pump would (a
// message.assistant naming the message, in its own transaction), one turn
// after another, 100 whole and 100 streamed. The overhead of a turn is from
// the answer's commit returning to the client having the answer's text
// decoded (the feed's wake-up, the handler's mapping, the response); the
// figures are its p50 and p99, whole and streamed. The client, the server
// and PostgreSQL share the machine; the API server's filters are not in it
// (test/integration's OpenAI spec measures through them).
func BenchmarkOpenAIChat(b *testing.B) {
	const turns = 100
	e := newEnv(b)
	dot := e.dots["team-a/helper"]
	srv := openAIServer(b, e)
	oc := openai.NewClient(option.WithBaseURL(srv.URL+"/v1/"), option.WithAPIKey("editor"), option.WithMaxRetries(0))

	// The stand-in Dot: it answers every message of the Dot at once.
	var (
		mu        sync.Mutex
		committed = map[string]time.Time{}
		seq       atomic.Int64
	)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := client.New(e.restConfig("admin"))
	if err != nil {
		b.Fatal(err)
	}
	messages, _ := c.Stream(ctx, client.StreamOptions{Namespace: "team-a", Dot: "helper", Types: []string{wire.EventMessageUser}})
	go func() {
		for ev := range messages {
			var m wire.MessageUser
			if json.Unmarshal(ev.Data, &m) != nil {
				continue
			}
			text := "echo: " + m.Text
			data, _ := json.Marshal(protocol.MessageAssistant{Text: text, InReplyTo: ptr.To(wire.MessageID(ev.ID)), SpentUSD: ptr.To(0.001)})
			s := seq.Add(1)
			if _, err := testStore.AppendEvents(ctx, store.Event{Dot: dot, Type: protocol.EventMessageAssistant, Source: store.SourceGuest, GuestSeq: &s, Data: data}); err != nil {
				return
			}
			at := time.Now()
			mu.Lock()
			committed[text] = at
			mu.Unlock()
		}
	}()
	for deadline := time.Now().Add(10 * time.Second); e.feed.subscribers() < 1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatal("the stand-in Dot did not follow the log within 10 s")
		}
	}
	overhead := func(text string, got time.Time) time.Duration {
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
			mu.Lock()
			at, ok := committed[text]
			mu.Unlock()
			if ok {
				return max(got.Sub(at), 0)
			}
			if time.Now().After(deadline) {
				b.Fatalf("no commit of %q noted", text)
			}
		}
	}
	model := wire.OpenAIModelID("team-a", "helper")
	for b.Loop() {
		var whole, streamed []time.Duration
		for i := range turns {
			say := "turn " + time.Now().Format(time.RFC3339Nano)
			resp, err := oc.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: model, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(say)}})
			got := time.Now()
			if err != nil {
				b.Fatalf("turn %d: %v", i, err)
			}
			if resp.Choices[0].Message.Content != "echo: "+say {
				b.Fatalf("turn %d: answered %q", i, resp.Choices[0].Message.Content)
			}
			whole = append(whole, overhead("echo: "+say, got))

			say = "streamed " + say
			stream := oc.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: model, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(say)}})
			var at time.Time
			for stream.Next() {
				if ch := stream.Current(); at.IsZero() && len(ch.Choices) > 0 && ch.Choices[0].Delta.Content != "" {
					at = time.Now()
				}
			}
			if err := stream.Err(); err != nil || at.IsZero() {
				b.Fatalf("streamed turn %d: %v (content seen: %t)", i, err, !at.IsZero())
			}
			streamed = append(streamed, overhead("echo: "+say, at))
		}
		slices.Sort(whole)
		slices.Sort(streamed)
		ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
		b.ReportMetric(ms(quantile(whole, 0.50)), "whole-p50-ms")
		b.ReportMetric(ms(quantile(whole, 0.99)), "whole-p99-ms")
		b.ReportMetric(ms(quantile(streamed, 0.50)), "streamed-p50-ms")
		b.ReportMetric(ms(quantile(streamed, 0.99)), "streamed-p99-ms")
	}
}
