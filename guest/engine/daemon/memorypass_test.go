package daemon

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/ptr"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// The memory pass's quiet time in these tests, instead of 5 minutes.
const testQuiet = 300 * time.Millisecond

const memoryPath = "/home/dot/memory/MEMORY.md"

// memoryRequests are the requests of the memory passes the fake model got.
func memoryRequests(or *fakeOpenRouter) []fakeRequest {
	var out []fakeRequest
	for _, r := range or.Requests() {
		if len(r.Messages) > 0 && strings.HasPrefix(r.Messages[0].text(), "You keep MEMORY.md") {
			out = append(out, r)
		}
	}
	return out
}

// conversationsPart is what a memory request says was said, without the
// current MEMORY.md.
func conversationsPart(t testing.TB, r fakeRequest) string {
	t.Helper()
	// The last mark: the fake model's notes echo the request before.
	u := firstUser(r)
	i := strings.LastIndex(u, "Conversations since the last update")
	if i < 0 {
		t.Fatalf("the memory request has no conversations: %q", u)
	}
	return u[i:]
}

// TestMemoryPass: after a quiet spell the summary model rewrites MEMORY.md
// from what was said, with no tools, and memory.updated reports it with its
// spend; a quiet spell with nothing new asks nothing; the next pass takes
// only the messages since.
func TestMemoryPass(t *testing.T) {
	or := newFakeOpenRouter(t)
	h := startEngine(t, t.TempDir(), or, nil, func(c *Config) { c.MemoryQuiet = testQuiet })
	cfg := testConfig(nil)
	cfg.Models = map[string]string{"summary": "fake/summary"}
	h.configure(cfg)
	s := openStream(t, h.c, 0, false)
	h.send("m1", protocol.InboundUserMessage, protocol.UserMessage{Text: "I like window seats"})
	evs := s.waitFor(t, "memory.updated", hasType(protocol.EventMemoryUpdated))
	got := decode[protocol.MemoryUpdated](t, ofType(evs, protocol.EventMemoryUpdated)[0])
	if diff := cmp.Diff(protocol.MemoryUpdated{Conversations: 1, Changed: true, SpentUSD: ptr.To(0.001)}, got); diff != "" {
		t.Errorf("memory.updated -want +got:\n%s", diff)
	}
	reqs := memoryRequests(or)
	if len(reqs) != 1 {
		t.Fatalf("%d memory requests; want 1", len(reqs))
	}
	r := reqs[0]
	if r.Model != "fake/summary" || len(r.Tools) != 0 || r.ToolChoice != "" {
		t.Errorf("the memory request went to %s with %d tools (tool_choice %q); want the summary model and no tools", r.Model, len(r.Tools), r.ToolChoice)
	}
	said := conversationsPart(t, r)
	for _, want := range []string{"Person\n\nI like window seats", "Dot\n\necho: I like window seats", "/home/dot/conversations/chat/"} {
		if !strings.Contains(said, want) {
			t.Errorf("the memory request lacks %q:\n%s", want, said)
		}
	}
	if !strings.Contains(firstUser(r), "(empty: there is no MEMORY.md yet)") {
		t.Errorf("the first pass does not say MEMORY.md is empty:\n%s", firstUser(r))
	}
	// The fake model answers "echo: <the request>": that is the new file.
	if mem := h.files.Get(memoryPath); !strings.HasPrefix(mem, "echo: Current MEMORY.md:") || !strings.Contains(mem, "I like window seats") {
		t.Errorf("MEMORY.md is %q; want the model's answer", mem)
	}

	// A quiet spell with nothing new: no request, no event.
	time.Sleep(4 * testQuiet)
	if n := len(memoryRequests(or)); n != 1 {
		t.Errorf("%d memory requests after a quiet spell with nothing new; want still 1", n)
	}
	if n := countType(s.Events(), protocol.EventMemoryUpdated); n != 1 {
		t.Errorf("%d memory.updated after a quiet spell with nothing new; want still 1", n)
	}

	// The next conversation: only what was said since is taken, beside the
	// notes the last pass wrote.
	h.send("m2", protocol.InboundUserMessage, protocol.UserMessage{Text: "I moved to Lyon"})
	evs = s.waitFor(t, "a second memory.updated", func(evs []protocol.OutboundEvent) bool {
		return countType(evs, protocol.EventMemoryUpdated) == 2
	})
	second := decode[protocol.MemoryUpdated](t, ofType(evs, protocol.EventMemoryUpdated)[1])
	if diff := cmp.Diff(protocol.MemoryUpdated{Conversations: 1, Changed: true, SpentUSD: ptr.To(0.001)}, second); diff != "" {
		t.Errorf("the second memory.updated -want +got:\n%s", diff)
	}
	reqs = memoryRequests(or)
	said = conversationsPart(t, reqs[len(reqs)-1])
	if !strings.Contains(said, "I moved to Lyon") || strings.Contains(said, "I like window seats") || !strings.Contains(said, "(from its message 3)") {
		t.Errorf("the second pass took %q; want only the messages since the first", said)
	}
	if !strings.Contains(firstUser(reqs[len(reqs)-1]), "Current MEMORY.md:\necho: Current MEMORY.md:") {
		t.Errorf("the second pass does not build on the MEMORY.md the first wrote:\n%s", firstUser(reqs[len(reqs)-1]))
	}
}

// TestMemoryPassFailureKeepsTheConversation: a model request that fails
// writes nothing and sends nothing; the pass is tried again after the next
// turn and takes what the failed one could not, and a failed request counts
// nothing.
func TestMemoryPassFailureKeepsTheConversation(t *testing.T) {
	or := newFakeOpenRouter(t)
	h := startEngine(t, t.TempDir(), or, nil, func(c *Config) { c.MemoryQuiet = testQuiet })
	h.configure(testConfig(nil))
	s := openStream(t, h.c, 0, false)
	h.send("m1", protocol.InboundUserMessage, protocol.UserMessage{Text: "my sister is Ada"})
	s.waitFor(t, "the answer", hasType(protocol.EventMessageAssistant))
	or.mu.Lock()
	or.status = []int{500, 500, 500, 500} // every attempt of the pass's request
	or.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for len(memoryRequests(or)) < 4 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(4 * testQuiet)
	if n := len(memoryRequests(or)); n != 4 {
		t.Fatalf("%d attempts of the memory request; want the 4 of one request, and no pass again before a turn", n)
	}
	if n := countType(s.Events(), protocol.EventMemoryUpdated); n != 0 {
		t.Errorf("a failed pass sent %d memory.updated; want none", n)
	}
	if mem := h.files.Get(memoryPath); mem != "" {
		t.Errorf("a failed pass wrote MEMORY.md: %q", mem)
	}

	h.send("m2", protocol.InboundUserMessage, protocol.UserMessage{Text: "Ada lives in Oslo"})
	evs := s.waitFor(t, "memory.updated", hasType(protocol.EventMemoryUpdated))
	got := decode[protocol.MemoryUpdated](t, ofType(evs, protocol.EventMemoryUpdated)[0])
	if diff := cmp.Diff(protocol.MemoryUpdated{Conversations: 1, Changed: true, SpentUSD: ptr.To(0.001)}, got); diff != "" {
		t.Errorf("memory.updated -want +got:\n%s", diff)
	}
	reqs := memoryRequests(or)
	said := conversationsPart(t, reqs[len(reqs)-1])
	for _, want := range []string{"my sister is Ada", "Ada lives in Oslo"} {
		if !strings.Contains(said, want) {
			t.Errorf("the pass after the failure lacks %q:\n%s", want, said)
		}
	}
}

// TestMemoryPassSurvivesACrash: a crash after MEMORY.md is written and
// before memory.updated commits loses no spend and counts none twice: the
// next pass takes the files again and reports both requests once; a crash
// right after the commit makes no second report of the first pass.
func TestMemoryPassSurvivesACrash(t *testing.T) {
	if testing.Short() {
		t.Skip("starts engine processes")
	}
	or := newFakeOpenRouter(t)
	quiet := EnvTestMemoryQuiet + "=" + testQuiet.String()
	for _, c := range []struct {
		crashAt string
		// spent is what the pass after the restart reports.
		spent float64
		// reports is how many memory.updated the log holds in the end.
		reports int
	}{
		{"before:memory", 0.002, 1},
		{"memory", 0.001, 2},
	} {
		t.Run(c.crashAt, func(t *testing.T) {
			dir := t.TempDir()
			first := startSub(t, dir, or.srv.URL, c.crashAt, quiet)
			first.push(testConfig(nil))
			first.send("m1", protocol.InboundUserMessage, protocol.UserMessage{Text: "call me Sam"})
			if !first.waitExit(20 * time.Second) {
				t.Fatalf("the engine did not die at %s", c.crashAt)
			}
			second := startSub(t, dir, or.srv.URL, "", quiet)
			second.push(testConfig(nil))
			after := openStream(t, second.c, 0, false)
			// The fake files lived in the dead process: the next turn writes
			// the chat's file again, whole.
			second.send("m2", protocol.InboundUserMessage, protocol.UserMessage{Text: "I am vegetarian"})
			evs := after.waitFor(t, "the pass after the restart", func(evs []protocol.OutboundEvent) bool {
				return countType(evs, protocol.EventMemoryUpdated) == c.reports
			})
			reports := ofType(evs, protocol.EventMemoryUpdated)
			last := decode[protocol.MemoryUpdated](t, reports[len(reports)-1])
			if last.SpentUSD == nil || *last.SpentUSD != c.spent {
				t.Errorf("the pass after the restart reports %v USD; want %v: %s", last.SpentUSD, c.spent, describe(evs))
			}
			time.Sleep(4 * testQuiet)
			if n := countType(after.Events(), protocol.EventMemoryUpdated); n != c.reports {
				t.Errorf("%d memory.updated; want %d", n, c.reports)
			}
		})
	}
}

// TestMemoryPassCutKeepsWhatItDid: a pass that needs several requests
// writes MEMORY.md after each (ref 8.6), so a sleep during its second request
// leaves the first one's answer, sends no memory.updated, and the next pass
// builds on that answer and takes only what the first request did not.
func TestMemoryPassCutKeepsWhatItDid(t *testing.T) {
	or := newFakeOpenRouter(t)
	h := startEngine(t, t.TempDir(), or, nil, func(c *Config) { c.MemoryQuiet = testQuiet })
	cfg := testConfig(nil)
	cfg.Models = map[string]string{"summary": "fake/summary"}
	h.configure(cfg)
	s := openStream(t, h.c, 0, false)
	// The person's message and the Dot's echo of it are too long for one
	// request of a summary model with a small window: a request each.
	h.send("m1", protocol.InboundUserMessage, protocol.UserMessage{Text: strings.Repeat("I like window seats. ", 150)})
	or.mu.Lock()
	or.window, or.holdMemoryAfter = 1000, 1
	or.mu.Unlock()
	s.waitFor(t, "the answer", hasType(protocol.EventMessageAssistant))
	deadline := time.Now().Add(10 * time.Second)
	for len(memoryRequests(or)) < 2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	reqs := memoryRequests(or)
	if len(reqs) != 2 {
		t.Fatalf("%d memory requests; want the second held", len(reqs))
	}
	if said := conversationsPart(t, reqs[0]); !strings.Contains(said, "(from its message 1)") || strings.Contains(said, "echo: I like") {
		t.Fatalf("the first request took %q; want the person's message alone", said)
	}
	if code, body := call(t, h.c, "POST", "/prepare-sleep", nil); code != 204 {
		t.Fatalf("prepare-sleep = %d %s", code, body)
	}
	// The pass sees the sleep within a poll and abandons its request.
	cut := func() bool { or.mu.Lock(); defer or.mu.Unlock(); return or.memoryCut == 1 }
	for deadline := time.Now().Add(10 * time.Second); !cut() && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if !cut() {
		t.Fatal("the sleep did not cut the pass's second request")
	}
	first := h.files.Get(memoryPath)
	if !strings.HasPrefix(first, "echo: Current MEMORY.md:") || !strings.Contains(first, "(from its message 1)") || strings.Contains(first, "(from its message 2)") {
		t.Errorf("MEMORY.md after the cut pass is %q; want the first request's answer", first)
	}
	if n := countType(s.Events(), protocol.EventMemoryUpdated); n != 0 {
		t.Errorf("the cut pass sent %d memory.updated; want none", n)
	}

	// The next quiet spell takes up the rest, on the notes the cut pass wrote.
	or.mu.Lock()
	or.holdMemoryAfter = 0
	or.mu.Unlock()
	call(t, h.c, "POST", "/secrets", protocol.SecretsRequest{OpenRouterAPIKey: "sk-or-test-key-123"})
	evs := s.waitFor(t, "memory.updated", hasType(protocol.EventMemoryUpdated))
	if got := decode[protocol.MemoryUpdated](t, ofType(evs, protocol.EventMemoryUpdated)[0]); !got.Changed || got.Conversations != 1 {
		t.Errorf("memory.updated = %+v; want one conversation, changed", got)
	}
	reqs = memoryRequests(or)
	next := reqs[len(reqs)-1]
	if said := conversationsPart(t, next); !strings.Contains(said, "(from its message 2)") || strings.Contains(said, "(from its message 1)") {
		t.Errorf("the next pass took %q; want only the Dot's message", said)
	}
	if u := firstUser(next); !strings.Contains(u, "Current MEMORY.md:\n"+strings.TrimSpace(first)) {
		t.Errorf("the next pass does not build on the MEMORY.md the cut one wrote:\n%.300s", u)
	}
}
