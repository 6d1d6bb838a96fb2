package memory

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/invisible-dots/invisible-dots/guest/agentd/fileclient"
	"github.com/invisible-dots/invisible-dots/guest/engine/work"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// fakeFiles stands in for dot-agentd's file routes.
type fakeFiles struct {
	mu    sync.Mutex
	files map[string]string
	mtime map[string]string
	down  bool
}

func (f *fakeFiles) Read(_ context.Context, p string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return nil, fmt.Errorf("dot-agentd does not answer")
	}
	v, ok := f.files[p]
	if !ok {
		return nil, &fileclient.Error{Status: 404, Code: protocol.ErrNotFound, Path: p}
	}
	return []byte(v), nil
}

func (f *fakeFiles) Write(_ context.Context, p string, data []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.files[p] = string(data)
	return nil
}

func (f *fakeFiles) List(_ context.Context, dir string) ([]protocol.ListEntry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return nil, fmt.Errorf("dot-agentd does not answer")
	}
	seen := map[string]protocol.ListEntry{}
	for p := range f.files {
		rest, ok := strings.CutPrefix(p, dir+"/")
		if !ok {
			continue
		}
		name, _, isDir := strings.Cut(rest, "/")
		typ := "file"
		if isDir {
			typ = "dir"
		}
		seen[name] = protocol.ListEntry{Name: name, Type: typ, Mtime: f.mtime[p]}
	}
	var out []protocol.ListEntry
	for _, e := range seen {
		out = append(out, e)
	}
	return out, nil
}

func TestSystemPrompt(t *testing.T) {
	files := &fakeFiles{files: map[string]string{
		"/home/dot/memory/MEMORY.md":           "- 2026-11-30: the person likes window seats\n" + strings.Repeat("y", 30000),
		"/home/dot/memory/trips.md":            "trips",
		"/home/dot/memory/old.md":              "old",
		"/home/dot/skills/fares/SKILL.md":      "---\nname: fares\ndescription: Watch fares\n---\n1. look\n",
		"/home/dot/skills/bad/SKILL.md":        "---\nname: other\ndescription: wrong folder\n---\n",
		"/home/dot/skills/playwright/SKILL.md": "---\nname: playwright\ndescription: mine replaces the built-in one\n---\n",
	}, mtime: map[string]string{"/home/dot/memory/trips.md": "2026-11-30T10:00:00Z", "/home/dot/memory/old.md": "2026-01-01T00:00:00Z"}}
	builtin := t.TempDir()
	os.MkdirAll(filepath.Join(builtin, "playwright"), 0o755)
	os.WriteFile(filepath.Join(builtin, "playwright", "SKILL.md"), []byte("---\nname: playwright\ndescription: built-in\n---\n"), 0o644)
	m := &Memory{Files: files, Home: "/home/dot", BuiltinSkills: builtin}
	cfg := protocol.RuntimeConfig{Name: "fare-watch", Instructions: "Write findings to fares.csv."}
	now := time.Date(2026, 11, 30, 9, 30, 0, 0, time.UTC)
	p := m.SystemPrompt(context.Background(), cfg, []work.Tool{{Name: "exec"}, {Name: "read_file"}}, now)
	for _, want := range []string{
		"You are fare-watch", "Write findings to fares.csv.", "Your tools now: exec, read_file.",
		"the person likes window seats", "MEMORY.md is cut here", "Notes changed most recently: trips.md, old.md",
		"/home/dot/conversations", "- fares: Watch fares (/home/dot/skills/fares/SKILL.md)",
		"- playwright: mine replaces the built-in one", "Monday 30 November 2026",
	} {
		if !strings.Contains(p, want) {
			t.Errorf("system prompt lacks %q", want)
		}
	}
	if strings.Contains(p, strings.Repeat("y", 25001)) || strings.Contains(p, "wrong folder") {
		t.Errorf("MEMORY.md not cut at 25000 characters, or a broken skill listed")
	}
	// A listing that fails leaves its part out; the prompt is still made.
	files.down = true
	p = m.SystemPrompt(context.Background(), cfg, nil, now)
	if !strings.Contains(p, "You are fare-watch") || strings.Contains(p, "window seats") {
		t.Errorf("prompt with dot-agentd down = %q", p)
	}
}

// TestReadPromptReadsTheFilesWhenCalled: ReadPrompt reads the notes, MEMORY.md
// and the skills when it is called, and what it returns builds the prompt
// SystemPrompt makes from those files; a file changed after the read does
// not change that prompt.
func TestReadPromptReadsTheFilesWhenCalled(t *testing.T) {
	files := &fakeFiles{files: map[string]string{
		"/home/dot/memory/MEMORY.md":      "- 2026-11-30: the person likes window seats\n",
		"/home/dot/skills/fares/SKILL.md": "---\nname: fares\ndescription: Watch fares\n---\n1. look\n",
	}, mtime: map[string]string{}}
	m := &Memory{Files: files, Home: "/home/dot"}
	cfg := protocol.RuntimeConfig{Name: "fare-watch"}
	tools := []work.Tool{{Name: "exec"}}
	now := time.Date(2026, 11, 30, 9, 30, 0, 0, time.UTC)
	want := m.SystemPrompt(context.Background(), cfg, tools, now)
	build := m.ReadPrompt(context.Background())
	files.files["/home/dot/memory/MEMORY.md"] = "- 2026-12-01: the person moved to aisle seats\n"
	delete(files.files, "/home/dot/skills/fares/SKILL.md")
	if got := build(cfg, tools, now); got != want {
		t.Errorf("prompt built from the files read =\n%s\nwant (SystemPrompt before the change)\n%s", got, want)
	}
	if got := m.SystemPrompt(context.Background(), cfg, tools, now); !strings.Contains(got, "aisle seats") || strings.Contains(got, "fares") {
		t.Errorf("SystemPrompt after the change = %s, want the new MEMORY.md and no skill", got)
	}
}

func TestTranscribeMasksSecretsAndWritesCallsAsLines(t *testing.T) {
	files := &fakeFiles{files: map[string]string{}}
	m := &Memory{Files: files, Home: "/home/dot", Secrets: func() []string { return []string{"sk-or-secret-1"} },
		Target: func(name string, args map[string]any) string { s, _ := args["command"].(string); return s }}
	day := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	msgs := []work.Message{
		{ID: 1, Role: "user", Content: "my key is sk-or-secret-1", InboundID: "m1", At: day},
		{ID: 2, Role: "assistant", Content: "running it", ToolCalls: []work.Call{{ID: "c", Name: "exec", Arguments: `{"command":"make test"}`}}, At: day},
		{ID: 3, Role: "tool", Content: "PASS lots of output", ToolCallID: "c", At: day},
		{ID: 4, Role: "assistant", Content: "all green", At: day.Add(24 * time.Hour)},
	}
	m.Transcribe(context.Background(), "chat", "Chat", msgs)
	got := files.files["/home/dot/conversations/chat/2026-11-30.md"]
	want := "# Chat, 2026-11-30\n\n## 2026-11-30 09:00 Person\n\nmy key is ***\n\n## 2026-11-30 09:00 Dot\n\nrunning it\n- called exec: make test\n"
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("chat file (-want +got):\n%s", diff)
	}
	if _, ok := files.files["/home/dot/conversations/chat/2026-12-01.md"]; !ok {
		t.Errorf("the second day's file is missing: %v", files.files)
	}
	m.Transcribe(context.Background(), "task:t1", "Find fares", msgs[:1])
	if got := files.files["/home/dot/conversations/tasks/2026-11-30-t1.md"]; !strings.HasPrefix(got, "# Find fares\n") {
		t.Errorf("task file = %q", got)
	}
}

// TestTranscribeChatTurnAfterTurn: the chat's day files written turn after
// turn, from the day's messages as work's chatDays gives them, are the files
// written from scratch each time: with the newer messages after the older,
// a day the clock went back to written again, and a secret gathered later
// masked in what was said before it.
func TestTranscribeChatTurnAfterTurn(t *testing.T) {
	secrets := []string{"sk-or-secret-1"}
	target := func(name string, args map[string]any) string { s, _ := args["command"].(string); return s }
	files := &fakeFiles{files: map[string]string{}}
	m := &Memory{Files: files, Home: "/home/dot", Target: target, Secrets: func() []string { return secrets }}
	day1 := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	day2 := day1.Add(24 * time.Hour)
	var all []work.Message
	add := func(at time.Time, role, content string, calls ...work.Call) {
		all = append(all, work.Message{ID: int64(len(all) + 1), Role: role, Content: content, ToolCalls: calls, InboundID: "in", At: at})
	}
	// daysFrom is the messages of the days from the first holding a message
	// after `after`, as chatDays gives them.
	daysFrom := func(after int64) []work.Message {
		first := time.Time{}
		for _, msg := range all {
			if msg.ID > after && (first.IsZero() || msg.At.Before(first)) {
				first = msg.At
			}
		}
		from := first.Truncate(24 * time.Hour)
		var out []work.Message
		for _, msg := range all {
			if !msg.At.Before(from) {
				out = append(out, msg)
			}
		}
		return out
	}
	steps := []struct {
		reason string
		change func()
	}{
		{"a first turn", func() { add(day1, "user", "hello"); add(day1, "assistant", "hi there") }},
		{"a turn with a call", func() {
			add(day1, "user", "run it")
			add(day1, "assistant", "running", work.Call{ID: "c", Name: "exec", Arguments: `{"command":"make"}`})
			add(day1, "tool", "ok")
			add(day1, "assistant", "done")
		}},
		{"a turn on the next day", func() { add(day2, "user", "morning"); add(day2, "assistant", "morning to you") }},
		{"the clock went back a day", func() { add(day1.Add(time.Hour), "user", "late"); add(day2, "assistant", "noted") }},
		{"a secret gathered after it was said", func() { add(day2, "user", "token tok-later-99"); secrets = append(secrets, "tok-later-99") }},
		{"a turn after it", func() { add(day2, "assistant", "fine") }},
	}
	for _, step := range steps {
		written := m.Transcribed("chat")
		step.change()
		m.Transcribe(context.Background(), "chat", "Chat", daysFrom(written))
		scratch := &fakeFiles{files: map[string]string{}}
		fresh := &Memory{Files: scratch, Home: "/home/dot", Target: target, Secrets: func() []string { return secrets }}
		fresh.Transcribe(context.Background(), "chat", "Chat", all)
		if diff := cmp.Diff(scratch.files, files.files); diff != "" {
			t.Errorf("after %s, the files (-from scratch +turn after turn):\n%s", step.reason, diff)
		}
	}
}

func TestMCPSection(t *testing.T) {
	long := strings.Repeat("x", 3000)
	m := &Memory{MCPServers: func() []MCPServer {
		return []MCPServer{
			{Name: "time", Connected: true, Instructions: "Tells the time."},
			{Name: "search", Error: "it could not be started: npx: not found"},
			{Name: "denied", Connected: true, Instructions: "never shown"},
			{Name: "long", Connected: true, Instructions: long},
		}
	}}
	cfg := protocol.RuntimeConfig{Permissions: map[string]protocol.Decision{
		"mcp.time": protocol.Ask, "mcp.search": protocol.Allow, "mcp.denied": protocol.Deny, "mcp.long": protocol.Ask}}
	got := m.mcpSection(cfg)
	for _, want := range []string{"## time\nTells the time.\n", "## search (not connected)\nIts tools are not offered now: it could not be started: npx: not found\n",
		"## long\n" + strings.Repeat("x", mcpInstructionsMax) + "…\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("the MCP section lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "denied") {
		t.Errorf("a denied server is told of:\n%s", got)
	}
	if (&Memory{}).mcpSection(cfg) != "" {
		t.Errorf("a memory without servers tells of some")
	}
}
