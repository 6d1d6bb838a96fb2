package work

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/invisible-dots/invisible-dots/guest/engine/openrouter"
	"github.com/invisible-dots/invisible-dots/guest/engine/store"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// instantModel answers every request at once, and costs a little.
type instantModel struct{}

func (instantModel) Complete(ctx context.Context, key string, req openrouter.Request) (openrouter.Response, error) {
	cost := 0.001
	return openrouter.Response{Content: "ok", FinishReason: "stop", Usage: openrouter.Usage{PromptTokens: 10, CostUSD: &cost}}, nil
}

func (instantModel) ModelLimits(ctx context.Context, key, model string) (openrouter.Limits, error) {
	return openrouter.Limits{ContextLength: 100000, MaxCompletionTokens: 4000, Providers: []string{"fake"}}, nil
}

// noTools is an empty tool table.
type noTools struct{}

func (noTools) Tools() []Tool { return nil }
func (noTools) Validate(name string, raw json.RawMessage) (map[string]any, error) {
	return nil, fmt.Errorf("no tool %s", name)
}
func (noTools) Target(string, map[string]any) string                    { return "" }
func (noTools) ApprovalArguments(string, map[string]any) map[string]any { return nil }
func (noTools) Run(context.Context, string, json.RawMessage) ToolResult { return ToolResult{} }

// startTestEngine is an engine over a new store, configured and keyed.
func startTestEngine(t *testing.T) (*Engine, *store.Store) {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), store.FileName))
	if err != nil {
		t.Fatal(err)
	}
	e := New(Options{Store: st, Model: instantModel{}, Tools: noTools{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	cfg, err := json.Marshal(protocol.RuntimeConfig{
		Name: "helper", Model: protocol.ModelRef{Provider: "openrouter", ID: "fake/model"},
		Permissions: protocol.ResolvePermissions(nil, nil),
		Limits:      protocol.Limits{MaxStepsPerTask: 10, MaxCostPerTaskUSD: 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.PutConfig(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if err := e.SetSecrets(protocol.SecretsRequest{OpenRouterAPIKey: "sk-or-v1-" + strings.Repeat("a", 64)}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		e.Stop(context.Background(), false)
		st.Close()
	})
	return e, st
}

func (e *Engine) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestNextTurnStartsAfterTheLastOnesEnd: a turn that starts the moment the
// one before let go of the chat comes after that one's DONE and IDLE (ref
// 8.1). The end of a turn once let go of the chat before it computed its
// end state: a turn started in between was counted as running then, and
// the DONE and IDLE of the turn before were never sent.
func TestNextTurnStartsAfterTheLastOnesEnd(t *testing.T) {
	e, st := startTestEngine(t)
	ctx := context.Background()
	var once atomic.Bool
	e.released = func() {
		if !once.CompareAndSwap(false, true) {
			return
		}
		// The next message comes now, and its turn starts before the
		// released turn goes on.
		if err := e.Accept(ctx, protocol.InboundEvent{ID: "m2", Type: protocol.InboundUserMessage,
			Data: json.RawMessage(`{"text":"again"}`)}); err != nil {
			t.Error(err)
		}
		e.waitFor(t, "the next turn", func() bool {
			e.mu.Lock()
			defer e.mu.Unlock()
			return e.chat != nil
		})
	}
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.Accept(ctx, protocol.InboundEvent{ID: "m1", Type: protocol.InboundUserMessage,
		Data: json.RawMessage(`{"text":"hello"}`)}); err != nil {
		t.Fatal(err)
	}
	want := "IDLE THINKING answer DONE IDLE THINKING answer DONE IDLE"
	if got := twoAnswers(ctx, t, e, st); got != want {
		t.Errorf("states and answers = %s, want %s", got, want)
	}
}

// slowFiles is a Memory whose chat file writes wait for hold to close; each
// write is announced on writing.
type slowFiles struct {
	writing chan int // the number of messages the write was given
	hold    chan struct{}
}

func (slowFiles) SystemPrompt(context.Context, protocol.RuntimeConfig, []Tool, time.Time) string {
	return "system"
}

func (f slowFiles) Transcribe(ctx context.Context, session, title string, msgs []Message) {
	f.writing <- len(msgs)
	<-f.hold
}

func (slowFiles) Transcribed(string) int64 { return 0 }

// countingModel is instantModel that counts its requests.
type countingModel struct {
	instantModel
	requests atomic.Int32
}

func (m *countingModel) Complete(ctx context.Context, key string, req openrouter.Request) (openrouter.Response, error) {
	m.requests.Add(1)
	return m.instantModel.Complete(ctx, key, req)
}

// TestMessageWhileTheFileIsWrittenOpensItsTurn: a message that comes while
// the chat's turn writes its conversation file (its answer, DONE and IDLE
// committed) opens the next turn in the transaction that accepts it, as a
// message to a free chat does, and that turn runs only once the file is
// written. It waited for the chat before, and its turn then cost a commit of
// its own (turn-open).
func TestMessageWhileTheFileIsWrittenOpensItsTurn(t *testing.T) {
	e, st := startTestEngine(t)
	ctx := context.Background()
	files := slowFiles{writing: make(chan int), hold: make(chan struct{})}
	model := &countingModel{}
	e.mem, e.model = files, model
	var mu sync.Mutex
	var points []string
	st.AfterCommit = func(point string) {
		mu.Lock()
		points = append(points, point)
		mu.Unlock()
	}
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.Accept(ctx, protocol.InboundEvent{ID: "m1", Type: protocol.InboundUserMessage,
		Data: json.RawMessage(`{"text":"hello"}`)}); err != nil {
		t.Fatal(err)
	}
	if n := <-files.writing; n != 2 {
		t.Errorf("the first turn's file was written from %d messages, want 2", n)
	}
	if err := e.Accept(ctx, protocol.InboundEvent{ID: "m2", Type: protocol.InboundUserMessage,
		Data: json.RawMessage(`{"text":"again"}`)}); err != nil {
		t.Fatal(err)
	}
	e.mu.Lock()
	opened := e.chat != nil && e.chat.opened && e.chat.kind == "input"
	e.mu.Unlock()
	if !opened {
		t.Errorf("the message did not open the chat's next turn as it was accepted")
	}
	// The first turn still writes its file: the second has not asked the
	// model yet.
	time.Sleep(20 * time.Millisecond)
	if n := model.requests.Load(); n != 1 {
		t.Errorf("the model was asked %d times while the first turn wrote its file, want 1", n)
	}
	close(files.hold)
	<-files.writing

	want := "IDLE THINKING answer DONE IDLE THINKING answer DONE IDLE"
	if got := twoAnswers(ctx, t, e, st); got != want {
		t.Errorf("states and answers = %s, want %s", got, want)
	}
	mu.Lock()
	got := strings.Join(points, " ")
	mu.Unlock()
	if want := "recover inbound assistant inbound assistant"; got != want {
		t.Errorf("commit points = %s, want %s", got, want)
	}
}

// readAheadMemory is a Memory that reads its prompt's files ahead
// (PromptReader), counting how the prompts were made.
type readAheadMemory struct {
	slowFiles
	mu                  sync.Mutex
	readAhead, readLate int
	built               []string
}

func (m *readAheadMemory) ReadPrompt(ctx context.Context) PromptBuilder {
	m.mu.Lock()
	m.readAhead++
	m.mu.Unlock()
	return func(cfg protocol.RuntimeConfig, tools []Tool, now time.Time) string {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.built = append(m.built, "ahead")
		return "system read ahead"
	}
}

func (m *readAheadMemory) SystemPrompt(context.Context, protocol.RuntimeConfig, []Tool, time.Time) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.readLate++
	m.built = append(m.built, "late")
	return "system"
}

func (*readAheadMemory) Transcribe(context.Context, string, string, []Message) {}

// promptModel is instantModel that records each request's system prompt.
type promptModel struct {
	instantModel
	mu      sync.Mutex
	systems []string
}

func (m *promptModel) Complete(ctx context.Context, key string, req openrouter.Request) (openrouter.Response, error) {
	m.mu.Lock()
	m.systems = append(m.systems, req.Messages[0].Content)
	m.mu.Unlock()
	return m.instantModel.Complete(ctx, key, req)
}

// TestTheTurnAMessageOpensReadsItsPromptAhead: the chat's turn that a
// message opens as it is accepted reads its prompt's files while the
// message commits (PromptReader), and its first request's prompt is built
// from that read, not read again.
func TestTheTurnAMessageOpensReadsItsPromptAhead(t *testing.T) {
	e, _ := startTestEngine(t)
	ctx := context.Background()
	mem := &readAheadMemory{}
	model := &promptModel{}
	e.mem, e.model = mem, model
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for i, text := range []string{"hello", "again"} {
		if err := e.Accept(ctx, protocol.InboundEvent{ID: fmt.Sprintf("m%d", i), Type: protocol.InboundUserMessage,
			Data: json.RawMessage(`{"text":"` + text + `"}`)}); err != nil {
			t.Fatal(err)
		}
		e.waitFor(t, "the answer", func() bool {
			e.mu.Lock()
			defer e.mu.Unlock()
			return e.chat == nil
		})
	}
	mem.mu.Lock()
	defer mem.mu.Unlock()
	model.mu.Lock()
	defer model.mu.Unlock()
	if got, want := strings.Join(mem.built, " "), "ahead ahead"; got != want {
		t.Errorf("prompts built = %s, want %s", got, want)
	}
	if mem.readAhead != 2 || mem.readLate != 0 {
		t.Errorf("prompt files read ahead %d times and at the request %d times, want 2 and 0", mem.readAhead, mem.readLate)
	}
	for _, s := range model.systems {
		if !strings.HasPrefix(s, "system read ahead") {
			t.Errorf("a request's system prompt = %q, want the one read ahead", s)
		}
	}
}

// twoAnswers waits until the outbox holds two answers and ends IDLE, and
// returns its agent states and answers in order ("answer" for each).
func twoAnswers(ctx context.Context, t *testing.T, e *Engine, st *store.Store) string {
	t.Helper()
	var seq []string
	e.waitFor(t, "two answers and IDLE", func() bool {
		evs, err := st.EventsAfter(ctx, 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		seq = seq[:0]
		for _, ev := range evs {
			switch ev.Type {
			case protocol.EventAgentState:
				var s protocol.AgentStateChanged
				json.Unmarshal(ev.Data, &s)
				seq = append(seq, string(s.State))
			case protocol.EventMessageAssistant:
				seq = append(seq, "answer")
			}
		}
		return strings.Count(strings.Join(seq, " "), "answer") == 2 && seq[len(seq)-1] == "IDLE"
	})
	return strings.Join(seq, " ")
}
