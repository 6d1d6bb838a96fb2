// Package memory is the Dot's memory and context (ref 8.6): the system
// prompt (the Dot's name and instructions, its notes and MEMORY.md, its past
// conversations, its skills, the day), the conversation files written after
// every turn, and the skills listed from their SKILL.md frontmatter. The
// Dot's files are reached through dot-agentd's file routes, as dot.
package memory

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/invisible-dots/invisible-dots/guest/engine/work"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// Files is the Dot's file system as dot sees it.
type Files interface {
	Read(ctx context.Context, p string) ([]byte, error)
	// Write writes data as the file p. It does not keep data after it
	// returns (as io.Writer does not): Transcribe goes on appending to the
	// buffer it hands it.
	Write(ctx context.Context, p string, data []byte) error
	List(ctx context.Context, p string) ([]protocol.ListEntry, error)
}

// Limits of ref 8.6.
const (
	memoryFileMax = 25000 // characters of MEMORY.md in every prompt
	recentNotes   = 20    // notes named in the prompt
)

// Memory implements work.Memory and the skills listing.
type Memory struct {
	Files Files
	// Home is the Dot's home (/home/dot).
	Home string
	// BuiltinSkills is the engine's own skills directory, on its runtime
	// disk (/opt/invisible-dots/engine/skills); read directly.
	BuiltinSkills string
	// Target names what a call acted on, for the conversation files.
	Target func(name string, args map[string]any) string
	// Secrets returns the values masked as *** in the files (the key).
	Secrets func() []string
	// MCPServers returns the declared MCP servers the prompt tells of (ref
	// 8.3: what each said at initialize, or why it is not connected); nil
	// tells of none.
	MCPServers func() []MCPServer
	// BrowserInstructions returns what the browser's MCP server said at
	// initialize (ref 8.3: how to drive a page); nil or "" tells nothing.
	BrowserInstructions func() string
	Log                 *slog.Logger

	mu      sync.Mutex
	written map[string]int64 // session -> newest message id written
	// chatFiles are the chat's day files last written, as rendered before
	// masking, by name (renderedFile).
	chatFiles map[string]renderedFile
}

// renderedFile is a conversation file as render made it from its messages.
// What a file shows of a message never changes once it is stored (work's
// chatDays), and a file lists its messages by id, so a file whose messages
// begin with the same ones is the same text with the newer ones' after it:
// the chat's day file, written again after every turn, is rendered from its
// new messages only, not from the whole day's at every turn.
type renderedFile struct {
	heading     string
	first, last int64 // the ids of its first and last message
	count       int   // its messages
	// text is appended to, never changed: the next file of the same
	// messages and more is text with the newer ones' after it, in the same
	// buffer when it has room, so that the day's text is not copied whole
	// at every turn, nor again to be written when nothing in it is masked.
	text []byte
}

// renderFile renders the file of msgs, from the rendered file when msgs
// begin with its messages.
func renderFile(heading string, msgs []work.Message, was renderedFile, target func(string, map[string]any) string) renderedFile {
	f := renderedFile{heading: heading, first: msgs[0].ID, last: msgs[len(msgs)-1].ID, count: len(msgs)}
	if was.heading == heading && was.count > 0 && was.count <= len(msgs) &&
		msgs[0].ID == was.first && msgs[was.count-1].ID == was.last {
		f.text = append(was.text, renderMessages(msgs[was.count:], target)...)
		return f
	}
	f.text = []byte(render(heading, msgs, target))
	return f
}

// MCPServer is one declared MCP server as the system prompt tells of it.
type MCPServer struct {
	Name         string
	Connected    bool
	Instructions string // what it said at initialize
	Error        string // why it is not connected
}

// mcpInstructionsMax cuts what a server said at initialize, as Claude Code
// cuts it (ref 8.3): a server's text must not crowd out the Dot's own.
const mcpInstructionsMax = 2048

func (m *Memory) mcpSection(cfg protocol.RuntimeConfig) string {
	if m.MCPServers == nil {
		return ""
	}
	var b strings.Builder
	for _, s := range m.MCPServers() {
		if cfg.Decision(protocol.MCPPermissionPrefix+s.Name) == protocol.Deny {
			continue
		}
		if s.Connected {
			fmt.Fprintf(&b, "## %s\n", s.Name)
			if text := boundInstructions(s.Instructions); text != "" {
				b.WriteString(text + "\n")
			}
			continue
		}
		fmt.Fprintf(&b, "## %s (not connected)\nIts tools are not offered now: %s\n", s.Name, s.Error)
	}
	if b.Len() == 0 {
		return ""
	}
	return "\n# MCP servers\nThe tools named mcp__<server>__<tool> are those of the MCP servers your configuration declares, " +
		"run on your computer as you or reached over the network; each use asks the person until they allow its server. " +
		"What each server said of itself:\n" + b.String()
}

func (m *Memory) log() *slog.Logger {
	if m.Log == nil {
		return slog.Default()
	}
	return m.Log
}

func (m *Memory) home() string {
	if m.Home == "" {
		return protocol.DefaultDotHome
	}
	return m.Home
}

var _ work.Memory = (*Memory)(nil)

// SystemPrompt builds the Dot's system prompt for a turn. A listing that
// fails (dot-agentd not answering) leaves its part out; the turn goes on.
func (m *Memory) SystemPrompt(ctx context.Context, cfg protocol.RuntimeConfig, tools []work.Tool, now time.Time) string {
	return m.ReadPrompt(ctx)(cfg, tools, now)
}

// ReadPrompt reads what the system prompt shows of the Dot's files (its
// notes, MEMORY.md, its skills: dot-agentd calls, a few a prompt) and
// returns what builds the prompt from them (work.PromptReader): the chat's
// turn reads them while the message that opened it commits, not after.
func (m *Memory) ReadPrompt(ctx context.Context) work.PromptBuilder {
	notes := m.readNotes(ctx)
	skills, err := m.Skills(ctx)
	if err != nil {
		skills = nil
	}
	return func(cfg protocol.RuntimeConfig, tools []work.Tool, now time.Time) string {
		return m.buildPrompt(cfg, tools, now, notes, skills)
	}
}

// buildPrompt is the system prompt of the notes and skills read.
func (m *Memory) buildPrompt(cfg protocol.RuntimeConfig, tools []work.Tool, now time.Time, notes notes, skills []protocol.Skill) string {
	home := m.home()
	var b strings.Builder
	fmt.Fprintf(&b, "You are %s, a Dot: a persistent agent that owns a computer, a Linux machine of your own, and works for one person.\n", cfg.Name)
	if strings.TrimSpace(cfg.Instructions) != "" {
		fmt.Fprintf(&b, "\n# Your instructions\n%s\n", strings.TrimSpace(cfg.Instructions))
	}
	b.WriteString("\n# How you work\n" +
		"You act only through your tools, calling them as functions; a call written in your text runs nothing. " +
		"The calls of one answer run one at a time, in your order. Some calls need the person's approval: such a call waits, " +
		"has not run, and you are told the decision in a later turn. A call the Dot's policy denies is not to be worked around. " +
		"When the work is done, answer without tool calls: that answer is what the person reads.\n")
	if len(tools) > 0 {
		names := make([]string, 0, len(tools))
		for _, t := range tools {
			names = append(names, t.Name)
		}
		fmt.Fprintf(&b, "Your tools now: %s.\n", strings.Join(names, ", "))
	}
	fmt.Fprintf(&b, "\n# Your computer\nCommands run as the user dot with the home %s; your workspace is %s/workspace, "+
		"where relative paths start. What you install or write stays between conversations.\n", home, home)
	b.WriteString(m.browserSection(tools))
	b.WriteString(m.mcpSection(cfg))
	b.WriteString(m.memorySection(notes))
	fmt.Fprintf(&b, "\n# Past conversations\nWhat was said before is in %s/conversations: chat/<day>.md, one file a day of the chat, "+
		"and tasks/, one file a task. Search there with grep when something said before matters, and before advice or a recommendation for the person.\n", home)
	if len(skills) > 0 {
		b.WriteString("\n# Skills\nHow to do a kind of task, one SKILL.md each. Read the file before a task it covers. " +
			"Write your own as " + home + "/skills/<name>/SKILL.md (frontmatter with name and description, then the steps); one of yours replaces a built-in one of the same name.\n")
		for _, s := range skills {
			fmt.Fprintf(&b, "- %s: %s (%s)\n", s.Name, s.Description, s.Path)
		}
	}
	fmt.Fprintf(&b, "\nToday is %s (UTC).\n", now.UTC().Format("Monday 2 January 2006, 15:04"))
	return b.String()
}

// browserSection tells how the browser identities work (ref 6) when the model
// may open one, with what the browser's server says of driving a page (its
// instructions at initialize, bounded as a declared server's are, ref 8.3).
func (m *Memory) browserSection(tools []work.Tool) string {
	for _, t := range tools {
		if t.Name == "browser_identity_launch" {
			out := "\n# Your browsers\nEach browser identity is a browser profile of its own: its cookies, storage and logins stay " +
				"between launches. Open one with browser_identity_launch before using the page tools (browser_navigate, browser_snapshot, " +
				"browser_click, ...), each of which takes the identity_id of an open identity; a page tool never opens one itself. " +
				"At most 3 are open at once. Read a page with browser_snapshot; a screenshot is shown to you in this turn only.\n"
			if m.BrowserInstructions != nil {
				if text := boundInstructions(m.BrowserInstructions()); text != "" {
					out += "What the browser's server says of driving a page:\n" + text + "\n"
				}
			}
			return out
		}
	}
	return ""
}

// boundInstructions trims what a server said at initialize and cuts it at
// mcpInstructionsMax characters.
func boundInstructions(text string) string {
	text = strings.TrimSpace(text)
	if r := []rune(text); len(r) > mcpInstructionsMax {
		text = string(r[:mcpInstructionsMax]) + "…"
	}
	return text
}

// notes is what the prompt shows of the Dot's notes: the newest names and
// MEMORY.md (memory, false when it could not be read).
type notes struct {
	recent    []string
	memory    string
	hasMemory bool
}

// readNotes reads the notes the prompt shows.
func (m *Memory) readNotes(ctx context.Context) notes {
	var n notes
	if m.Files == nil {
		return n
	}
	dir := path.Join(m.home(), "memory")
	entries, err := m.Files.List(ctx, dir)
	if err != nil {
		m.log().Debug("list memory notes", "err", err)
	} else {
		sort.Slice(entries, func(i, j int) bool { return entries[i].Mtime > entries[j].Mtime })
		for _, e := range entries {
			if e.Type == "file" && len(n.recent) < recentNotes {
				n.recent = append(n.recent, e.Name)
			}
		}
	}
	data, err := m.Files.Read(ctx, path.Join(dir, "MEMORY.md"))
	if err != nil {
		return n
	}
	n.memory, n.hasMemory = string(data), true
	return n
}

func (m *Memory) memorySection(n notes) string {
	dir := path.Join(m.home(), "memory")
	var b strings.Builder
	fmt.Fprintf(&b, "\n# Your memory\nYour long-term notes are files in %s, which you keep yourself with the file tools. "+
		"MEMORY.md is given to you in every prompt: what you should always know about the person, each fact with its day, "+
		"and one line for every other note. Put longer matters in other notes. Change or delete a note that is no longer true.\n", dir)
	if len(n.recent) > 0 {
		fmt.Fprintf(&b, "Notes changed most recently: %s.\n", strings.Join(n.recent, ", "))
	}
	if !n.hasMemory {
		return b.String()
	}
	text := n.memory
	if utf8.RuneCountInString(text) > memoryFileMax {
		text = string([]rune(text)[:memoryFileMax]) + "\n[MEMORY.md is cut here: it is longer than 25000 characters. Shorten it, moving details to other notes.]"
	}
	fmt.Fprintf(&b, "\n## MEMORY.md\n%s\n", text)
	return b.String()
}

// Transcribe writes the session's conversation files from its transcript
// (ref 8.6): chat/<day>.md for the chat, tasks/<day>-<id>.md for a task. Each
// call is one line, never what it returned; known secrets are masked.
func (m *Memory) Transcribe(ctx context.Context, session, title string, msgs []work.Message) {
	if m.Files == nil || len(msgs) == 0 {
		return
	}
	m.mu.Lock()
	if m.written == nil {
		m.written = map[string]int64{}
	}
	since := m.written[session]
	m.mu.Unlock()
	base := path.Join(m.home(), "conversations")
	files := map[string][]work.Message{}
	var order []string
	if taskID, ok := strings.CutPrefix(session, "task:"); ok {
		name := path.Join(base, "tasks", msgs[0].At.UTC().Format("2006-01-02")+"-"+safeName(taskID)+".md")
		files[name], order = msgs, []string{name}
	} else {
		touched := map[string]bool{}
		// dayFile names the file of each message's day. The name is made
		// when the day changes, not for every message (they come by id,
		// mostly a day after another): the chat's messages of the day are
		// all read at every turn.
		var day int64
		var name string
		dayFile := func(i int, msg work.Message) string {
			if d := utcDay(msg.At); i == 0 || d != day {
				day, name = d, path.Join(base, "chat", msg.At.UTC().Format("2006-01-02")+".md")
			}
			return name
		}
		last := ""
		for i, msg := range msgs {
			if n := dayFile(i, msg); n != last {
				last = n
				if _, seen := files[n]; !seen {
					order = append(order, n)
					files[n] = nil
				}
			}
			if msg.ID > since {
				touched[last] = true
			}
		}
		if len(order) == 1 {
			files[order[0]] = msgs // one day, the usual: its messages are msgs
		} else {
			for i, msg := range msgs {
				n := dayFile(i, msg)
				files[n] = append(files[n], msg)
			}
		}
		var keep []string
		for _, n := range order {
			if touched[n] {
				keep = append(keep, n)
			}
		}
		order = keep
	}
	var secrets []string
	if m.Secrets != nil {
		secrets = m.Secrets()
	}
	chat := !strings.HasPrefix(session, "task:")
	m.mu.Lock()
	was := m.chatFiles
	m.mu.Unlock()
	rendered := map[string]renderedFile{}
	for _, name := range order {
		var text []byte
		if chat {
			// Masked whole at every write: a secret gathered since masks
			// what was said before it too.
			f := renderFile("Chat, "+strings.TrimSuffix(path.Base(name), ".md"), files[name], was[name], m.Target)
			rendered[name], text = f, f.text
		} else {
			text = []byte(render(title, files[name], m.Target))
		}
		if err := m.Files.Write(ctx, name, maskBytes(text, secrets)); err != nil {
			m.log().Warn("write conversation file", "file", name, "err", err)
			return
		}
	}
	m.mu.Lock()
	m.written[session] = msgs[len(msgs)-1].ID
	if chat {
		// Only the files written now are kept: the chat's days before them
		// are written no more.
		m.chatFiles = rendered
	}
	m.mu.Unlock()
}

// utcDay numbers t's UTC day: Unix time has no leap seconds, so every UTC
// day is 86400 of its seconds.
func utcDay(t time.Time) int64 {
	s := t.Unix()
	d := s / 86400
	if s%86400 < 0 {
		d--
	}
	return d
}

// Transcribed is the newest message id Transcribe wrote of session.
func (m *Memory) Transcribed(session string) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.written[session]
}

func safeName(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '/' || r == '\\' || r < 0x20 {
			return '-'
		}
		return r
	}, s)
}

func render(title string, msgs []work.Message, target func(string, map[string]any) string) string {
	return fmt.Sprintf("# %s\n", strings.ReplaceAll(title, "\n", " ")) + renderMessages(msgs, target)
}

// renderMessages is the part of a conversation file that shows msgs.
func renderMessages(msgs []work.Message, target func(string, map[string]any) string) string {
	var b strings.Builder
	for _, msg := range msgs {
		at := msg.At.UTC().Format("2006-01-02 15:04")
		switch msg.Role {
		case "user":
			who := "Person"
			if msg.InboundID == "" {
				who = "Engine"
			}
			fmt.Fprintf(&b, "\n## %s %s\n\n%s\n", at, who, msg.Content)
		case "assistant":
			fmt.Fprintf(&b, "\n## %s Dot\n\n", at)
			if strings.TrimSpace(msg.Content) != "" {
				b.WriteString(msg.Content + "\n")
			}
			for _, c := range msg.ToolCalls {
				line := "- called " + c.Name
				if target != nil {
					var args map[string]any
					if json.Unmarshal([]byte(c.Arguments), &args) == nil {
						if t := target(c.Name, args); t != "" {
							line += ": " + t
						}
					}
				}
				b.WriteString(line + "\n")
			}
		}
	}
	return b.String()
}

// maskBytes replaces every secret of four bytes or more in b with ***
// (a shorter one would mask common words): b itself when it holds none,
// else a copy.
func maskBytes(b []byte, secrets []string) []byte {
	for _, s := range secrets {
		if len(s) >= 4 && bytes.Contains(b, []byte(s)) {
			b = bytes.ReplaceAll(b, []byte(s), []byte("***"))
		}
	}
	return b
}

// mask is maskBytes of a string: the one rule of what is masked and how.
func mask(text string, secrets []string) string {
	return string(maskBytes([]byte(text), secrets))
}

// Skills lists the built-in skills and the Dot's own by name; one of the
// Dot's replaces a built-in one of the same name. A SKILL.md that does not
// parse is left out and logged.
func (m *Memory) Skills(ctx context.Context) ([]protocol.Skill, error) {
	byName := map[string]protocol.Skill{}
	if m.BuiltinSkills != "" {
		dirs, err := os.ReadDir(m.BuiltinSkills)
		if err != nil && !os.IsNotExist(err) {
			m.log().Warn("read built-in skills", "err", err)
		}
		for _, d := range dirs {
			if !d.IsDir() {
				continue
			}
			p := filepath.Join(m.BuiltinSkills, d.Name(), "SKILL.md")
			data, err := os.ReadFile(p)
			if os.IsNotExist(err) {
				// The runtime ISO holds plain ISO 9660 names, which a guest
				// mounts in lower case.
				p = filepath.Join(m.BuiltinSkills, d.Name(), "skill.md")
				data, err = os.ReadFile(p)
			}
			if err != nil {
				continue
			}
			if s, err := parseSkill(d.Name(), p, string(data), protocol.SkillBuiltin); err != nil {
				m.log().Warn("skill left out", "path", p, "err", err)
			} else {
				byName[s.Name] = s
			}
		}
	}
	if m.Files != nil {
		dir := path.Join(m.home(), "skills")
		entries, err := m.Files.List(ctx, dir)
		if err == nil {
			for _, e := range entries {
				if e.Type != "dir" {
					continue
				}
				p := path.Join(dir, e.Name, "SKILL.md")
				data, err := m.Files.Read(ctx, p)
				if err != nil {
					continue
				}
				if s, err := parseSkill(e.Name, p, string(data), protocol.SkillDot); err != nil {
					m.log().Warn("skill left out", "path", p, "err", err)
				} else {
					byName[s.Name] = s
				}
			}
		}
	}
	out := make([]protocol.Skill, 0, len(byName))
	for _, s := range byName {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// parseSkill reads a SKILL.md's frontmatter: name (the folder's) and a
// one-line description.
func parseSkill(folder, p, content, source string) (protocol.Skill, error) {
	rest, ok := strings.CutPrefix(strings.TrimLeft(content, "\ufeff"), "---\n")
	if !ok {
		return protocol.Skill{}, fmt.Errorf("no frontmatter: the file must start with a --- line")
	}
	front, _, ok := strings.Cut(rest, "\n---")
	if !ok {
		return protocol.Skill{}, fmt.Errorf("the frontmatter has no closing --- line")
	}
	fields := map[string]string{}
	for _, line := range strings.Split(front, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		v = strings.Trim(v, `"'`)
		fields[strings.TrimSpace(k)] = v
	}
	if fields["name"] != folder {
		return protocol.Skill{}, fmt.Errorf("name %q is not the folder's (%q)", fields["name"], folder)
	}
	if fields["description"] == "" {
		return protocol.Skill{}, fmt.Errorf("no description")
	}
	return protocol.Skill{Name: folder, Description: fields["description"], Source: source, Path: p, Content: content}, nil
}
