package memory

import (
	"context"
	"errors"
	"fmt"
	"path"
	"regexp"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/invisible-dots/invisible-dots/guest/agentd/fileclient"
	"github.com/invisible-dots/invisible-dots/guest/engine/work"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// What the memory pass (ref 8.6) reads and writes: the conversation files
// this package writes after every turn, and MEMORY.md.

var _ work.Notebook = (*Memory)(nil)

// messageHeading starts each message of a conversation file, as render
// writes it: "## 2026-11-30 12:04 Person".
var messageHeading = regexp.MustCompile(`(?m)^## \d{4}-\d{2}-\d{2} \d{2}:\d{2} (Person|Engine|Dot)$`)

// Conversations lists the conversation files (chat and tasks) changed at or
// after since, each with its messages in order. A folder that cannot be
// listed (none written yet) has none; a file that cannot be read is an
// error, so a pass never takes a conversation it did not see.
func (m *Memory) Conversations(ctx context.Context, since time.Time) ([]work.Conversation, error) {
	if m.Files == nil {
		return nil, nil
	}
	base := path.Join(m.home(), "conversations")
	var out []work.Conversation
	for _, sub := range []string{"chat", "tasks"} {
		dir := path.Join(base, sub)
		entries, err := m.Files.List(ctx, dir)
		if err != nil {
			m.log().Debug("list conversation files", "dir", dir, "err", err)
			continue
		}
		for _, e := range entries {
			if e.Type != "file" || !strings.HasSuffix(e.Name, ".md") {
				continue
			}
			mtime, err := time.Parse(time.RFC3339Nano, e.Mtime)
			if err != nil {
				return nil, fmt.Errorf("the time of %s/%s is not RFC 3339: %q", dir, e.Name, e.Mtime)
			}
			if mtime.Before(since) {
				continue
			}
			p := path.Join(dir, e.Name)
			data, err := m.Files.Read(ctx, p)
			if err != nil {
				return nil, fmt.Errorf("read %s: %w", p, err)
			}
			out = append(out, work.Conversation{Path: p, Mtime: mtime, Messages: splitMessages(string(data))})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Mtime.Equal(out[j].Mtime) {
			return out[i].Mtime.Before(out[j].Mtime)
		}
		return out[i].Path < out[j].Path
	})
	return out, nil
}

// splitMessages cuts a conversation file into its messages, each with its
// heading; the file's title line is not one.
func splitMessages(text string) []string {
	idx := messageHeading.FindAllStringIndex(text, -1)
	out := make([]string, 0, len(idx))
	for i, at := range idx {
		end := len(text)
		if i+1 < len(idx) {
			end = idx[i+1][0]
		}
		out = append(out, strings.TrimSpace(text[at[0]:end]))
	}
	return out
}

func (m *Memory) memoryFile() string { return path.Join(m.home(), "memory", "MEMORY.md") }

// ReadMemory reads MEMORY.md, "" when there is none yet. Any other failure
// is an error: a pass that could not read the notes must not write over
// them.
func (m *Memory) ReadMemory(ctx context.Context) (string, error) {
	if m.Files == nil {
		return "", errors.New("the engine has no file client")
	}
	data, err := m.Files.Read(ctx, m.memoryFile())
	if fileclient.HasCode(err, protocol.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read MEMORY.md: %w", err)
	}
	return string(data), nil
}

// MemoryLimit is the most of MEMORY.md every prompt carries, in characters.
func (m *Memory) MemoryLimit() int { return memoryFileMax }

// WriteMemory writes MEMORY.md with every secret the engine knows masked,
// as in the conversation files, and returns what it wrote. A text longer
// than MemoryLimit is refused: the prompt would cut it.
func (m *Memory) WriteMemory(ctx context.Context, text string) (string, error) {
	if m.Files == nil {
		return "", errors.New("the engine has no file client")
	}
	if n := utf8.RuneCountInString(text); n > memoryFileMax {
		return "", fmt.Errorf("the new MEMORY.md has %d characters, more than the %d every prompt carries", n, memoryFileMax)
	}
	var secrets []string
	if m.Secrets != nil {
		secrets = m.Secrets()
	}
	text = mask(text, secrets)
	if err := m.Files.Write(ctx, m.memoryFile(), []byte(text)); err != nil {
		return "", fmt.Errorf("write MEMORY.md: %w", err)
	}
	return text, nil
}
