package memory

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/invisible-dots/invisible-dots/guest/engine/work"
)

// TestConversationsAsMessages: the memory pass reads the files Transcribe
// wrote as their messages, each with its heading, the files changed at or
// after since only, oldest first.
func TestConversationsAsMessages(t *testing.T) {
	files := &fakeFiles{files: map[string]string{}, mtime: map[string]string{}}
	m := &Memory{Files: files, Home: "/home/dot"}
	day := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	m.Transcribe(context.Background(), "chat", "Chat", []work.Message{
		{ID: 1, Role: "user", Content: "I like window seats\n\n## not a heading", InboundID: "m1", At: day},
		{ID: 2, Role: "assistant", Content: "noted", At: day.Add(time.Minute)},
	})
	m.Transcribe(context.Background(), "task:t1", "Find fares", []work.Message{{ID: 3, Role: "user", Content: "find fares", At: day}})
	files.mtime["/home/dot/conversations/chat/2026-11-30.md"] = "2026-11-30T09:01:00Z"
	files.mtime["/home/dot/conversations/tasks/2026-11-30-t1.md"] = "2026-11-30T08:00:00.5Z"

	got, err := m.Conversations(context.Background(), time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	want := []work.Conversation{
		{Path: "/home/dot/conversations/tasks/2026-11-30-t1.md", Mtime: time.Date(2026, 11, 30, 8, 0, 0, 5e8, time.UTC),
			Messages: []string{"## 2026-11-30 09:00 Engine\n\nfind fares"}},
		{Path: "/home/dot/conversations/chat/2026-11-30.md", Mtime: time.Date(2026, 11, 30, 9, 1, 0, 0, time.UTC),
			Messages: []string{"## 2026-11-30 09:00 Person\n\nI like window seats\n\n## not a heading", "## 2026-11-30 09:01 Dot\n\nnoted"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Conversations -want +got:\n%s", diff)
	}
	got, err = m.Conversations(context.Background(), time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC))
	if err != nil || len(got) != 1 || !strings.HasSuffix(got[0].Path, "chat/2026-11-30.md") {
		t.Errorf("Conversations since 09:00 = %v, %v; want the chat's file alone", got, err)
	}
	files.down = true
	if got, err := m.Conversations(context.Background(), time.Time{}); err != nil || len(got) != 0 {
		t.Errorf("Conversations with dot-agentd down = %v, %v; want none (nothing is taken)", got, err)
	}
}

// TestMemoryFile: MEMORY.md that does not exist reads as empty, one that
// cannot be read is an error (a pass must not write over notes it did not
// see); a write masks the known secrets and refuses what the prompt would
// cut.
func TestMemoryFile(t *testing.T) {
	files := &fakeFiles{files: map[string]string{}}
	m := &Memory{Files: files, Home: "/home/dot", Secrets: func() []string { return []string{"sk-or-secret-1"} }}
	ctx := context.Background()
	if got, err := m.ReadMemory(ctx); got != "" || err != nil {
		t.Errorf("ReadMemory with none = %q, %v; want empty", got, err)
	}
	wrote, err := m.WriteMemory(ctx, "- 2026-11-30: the key sk-or-secret-1 is theirs\n")
	if want := "- 2026-11-30: the key *** is theirs\n"; err != nil || wrote != want || files.files["/home/dot/memory/MEMORY.md"] != want {
		t.Errorf("WriteMemory wrote %q (%v), the file holds %q; want %q", wrote, err, files.files["/home/dot/memory/MEMORY.md"], want)
	}
	if got, err := m.ReadMemory(ctx); err != nil || !strings.Contains(got, "***") {
		t.Errorf("ReadMemory = %q, %v", got, err)
	}
	if _, err := m.WriteMemory(ctx, strings.Repeat("é", m.MemoryLimit()+1)); err == nil || !strings.Contains(err.Error(), "more than the 25000") {
		t.Errorf("WriteMemory of 25001 characters: %v; want refused", err)
	}
	files.down = true
	if _, err := m.ReadMemory(ctx); err == nil {
		t.Errorf("ReadMemory with dot-agentd down succeeded; want an error")
	}
}
