package work

import (
	"context"
	"database/sql"
	"fmt"
	"path"
	"regexp"
	"strings"
	"unicode"

	"github.com/invisible-dots/invisible-dots/guest/engine/store"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// The guardrail of untrusted input (issue 24): from the moment untrusted
// content enters the model's context, the session is tainted, and the
// permissions the Dot's untrustedInput.ask lists are asked even where they
// are allow. This file is the one place of the rule: which results and
// inputs taint, what the approval says, and what "allow for the rest of
// this task" remembers.
//
// A task's session stays tainted for the rest of the task (its context
// keeps the text); the chat's is tainted until the chat answers, the end of
// its turn. The state is in dots_taint, so a turn that resumes after an
// approval, or after a restart, is still tainted.

// downloadsDir is where files the Dot fetched from elsewhere land: a file
// read there is untrusted.
var downloadsDir = path.Join(protocol.DefaultDotHome, "downloads")

// workspaceDir is where relative paths of the file tools start.
var workspaceDir = protocol.DefaultWorkspace

// taintOf says whether a call's result taints the turn, and names its
// source. It is decided by the call's permission and arguments, before or
// after the call ran (the result's text only makes the source more exact).
//
//   - every browser page tool (browser.navigate, browser.read, browser.act:
//     each answers with the page's text or a screenshot of it);
//   - computer_screenshot: a screenshot of the desktop can show a page, or
//     a document, that someone else wrote;
//   - read_file, list_dir, find_files of a path under ~/downloads, and grep
//     of such a path or of a directory holding ~/downloads;
//   - every tool of a declared MCP server whose config is not trusted;
//   - an exec (or exec_session) whose command names ~/downloads or runs in
//     it, or runs a program that fetches from the network (curl, wget and
//     the like): its output is someone else's text.
//
// The exec rule reads the command's words, not what the shell does with
// them: a command that reaches a downloaded file through a variable or a
// script of its own is not seen. Reading more would need a sandbox that
// watches the files a command opens.
func taintOf(cfg protocol.RuntimeConfig, tool Tool, args map[string]any, result string) (protocol.Taint, bool) {
	by, ok := taintOfCall(cfg, tool, args, result)
	by.Source = oneLine(by.Source)
	return by, ok
}

// taintSourceMax is the longest source a taint names, in code points.
const taintSourceMax = 300

// oneLine is a source as events carry it: no control characters, cut.
func oneLine(s string) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
	return cutText(s, taintSourceMax)
}

func taintOfCall(cfg protocol.RuntimeConfig, tool Tool, args map[string]any, result string) (protocol.Taint, bool) {
	switch tool.Permission {
	case "browser.navigate", "browser.read", "browser.act":
		src := pageURL(result)
		if src == "" {
			if u, _ := args["url"].(string); u != "" {
				src = u
			}
		}
		if src == "" {
			src = "a page"
			if id, _ := args["identity_id"].(string); id != "" {
				src = "a page of browser identity " + id
			}
		}
		return protocol.Taint{Kind: protocol.TaintPage, Source: src}, true
	case "computer.screenshot":
		return protocol.Taint{Kind: protocol.TaintScreenshot, Source: "a screenshot of the desktop"}, true
	case "files.read":
		p, _ := args["path"].(string)
		full := homePath(p)
		if under(full, downloadsDir) || (tool.Name == "grep" && under(downloadsDir, full)) {
			return protocol.Taint{Kind: protocol.TaintDownload, Source: full}, true
		}
		return protocol.Taint{}, false
	case "computer.exec":
		return execTaint(args)
	}
	if server, ok := protocol.MCPServerOfPermission(tool.Permission); ok {
		if s, declared := cfg.MCPServers[server]; declared && s.Trusted {
			return protocol.Taint{}, false
		}
		return protocol.Taint{Kind: protocol.TaintMCP, Source: "MCP server " + server}, true
	}
	return protocol.Taint{}, false
}

// downloadsWordRe finds the downloads directory named in a command: as
// ~/downloads, $HOME/downloads, ${HOME}/downloads or its full path, alone or
// followed by a path inside it.
var downloadsWordRe = regexp.MustCompile(`(?:~|\$HOME|\$\{HOME\}|` + regexp.QuoteMeta(protocol.DefaultDotHome) + `)/downloads(?:/|$|[\s'";|&)<>])`)

// fetcherRe finds a program that prints what it fetched from the network,
// at a command's start or after a shell separator.
var fetcherRe = regexp.MustCompile(`(?:^|[\s;|&(` + "`" + `])(curl|wget|lynx|w3m|links|aria2c|http|xh)\s`)

// urlRe finds the first address in a command, to name the source.
var urlRe = regexp.MustCompile(`(?:https?|ftp)://[^\s'"<>|;&)]+`)

func execTaint(args map[string]any) (protocol.Taint, bool) {
	cmd, _ := args["command"].(string)
	if input, _ := args["input"].(string); input != "" {
		// exec_session's input to a job: on a shell, a command.
		cmd = input
	}
	if cwd, _ := args["cwd"].(string); cwd != "" && under(homePath(cwd), downloadsDir) {
		return protocol.Taint{Kind: protocol.TaintDownload, Source: homePath(cwd)}, true
	}
	if m := downloadsWordRe.FindString(cmd); m != "" {
		return protocol.Taint{Kind: protocol.TaintDownload, Source: "the command " + cmd}, true
	}
	if fetcherRe.MatchString(cmd + " ") {
		src := urlRe.FindString(cmd)
		if src == "" {
			src = "the network, by the command " + cmd
		}
		return protocol.Taint{Kind: protocol.TaintPage, Source: src}, true
	}
	return protocol.Taint{}, false
}

// pageURLRe finds the page's address in a page tool's answer
// (@playwright/mcp writes "- Page URL: https://...").
var pageURLRe = regexp.MustCompile(`(?m)Page URL:\s*(https?://\S+)`)

func pageURL(text string) string {
	if m := pageURLRe.FindStringSubmatch(text); m != nil {
		return m[1]
	}
	return ""
}

// homePath is a file tool's path as the tools resolve it: ~ is the home,
// a relative path starts in the workspace, empty is the workspace.
func homePath(p string) string {
	switch {
	case p == "":
		return workspaceDir
	case p == "~":
		return protocol.DefaultDotHome
	case strings.HasPrefix(p, "~/"):
		return path.Join(protocol.DefaultDotHome, p[2:])
	case path.IsAbs(p):
		return path.Clean(p)
	}
	return path.Join(workspaceDir, p)
}

// under reports whether p is dir or inside it.
func under(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, dir+"/")
}

// taskTaint is the taint a task brings in its own description: a Webhook's
// payload (the listener's marker) or another Dot's request.
func taskTaint(description string, requestedBy *string) (protocol.Taint, bool) {
	if requestedBy != nil && *requestedBy != "" {
		return protocol.Taint{Kind: protocol.TaintDelegation, Source: "Dot " + *requestedBy}, true
	}
	if i := strings.Index(description, protocol.UntrustedOpen); i >= 0 {
		return protocol.Taint{Kind: protocol.TaintWebhook, Source: webhookOf(description)}, true
	}
	return protocol.Taint{}, false
}

// webhookOf names the webhook of a description that begins with the
// listener's notice.
func webhookOf(description string) string {
	head, _, ok := strings.Cut(protocol.UntrustedNotice, "%s")
	if ok && strings.HasPrefix(description, head) {
		rest := description[len(head):]
		if name, _, ok := strings.Cut(rest, ")"); ok && name != "" && len(name) <= 300 {
			return "webhook " + name
		}
	}
	return "a webhook's payload"
}

// taintState is a session's taint as a turn holds it: the first source and
// the permissions the person allowed for the rest of the task.
type taintState struct {
	by      *protocol.Taint
	allowed map[string]bool
}

// asks reports whether the gate asks a call of permission that the config
// allows: the session is tainted, the config lists the permission under
// untrustedInput.ask, and the person did not allow it for the task.
func (s *taintState) asks(cfg *protocol.RuntimeConfig, permission string) bool {
	return s.by != nil && !s.allowed[permission] && cfg.UntrustedAsks(permission)
}

// taintReason is the approval's reason for a call asked because of taint.
func taintReason(permission string, by protocol.Taint) string {
	what := permission
	if info, ok := protocol.LookupPermission(permission); ok {
		what = fmt.Sprintf("%s (%s)", strings.ToLower(info.Label), permission)
	}
	return fmt.Sprintf("Asked because the Dot read %s in this turn: untrusted input may be steering it, and it wants to %s.",
		taintSource(by), what)
}

func taintSource(by protocol.Taint) string {
	switch by.Kind {
	case protocol.TaintDownload:
		return "the downloaded file " + by.Source
	case protocol.TaintMCP:
		return "a result of " + by.Source
	case protocol.TaintWebhook:
		return "the payload of " + by.Source
	case protocol.TaintDelegation:
		return "a request from " + by.Source
	}
	return by.Source
}

// loadTaint reads a session's taint.
func loadTaint(ctx context.Context, q store.Querier, session string) (taintState, error) {
	s := taintState{allowed: map[string]bool{}}
	rows, err := q.QueryContext(ctx, taintQuery, session)
	if err != nil {
		return s, fmt.Errorf("read taint of %s: %w", session, err)
	}
	defer rows.Close()
	for rows.Next() {
		var kind, source, permission sql.NullString
		if err := rows.Scan(&kind, &source, &permission); err != nil {
			return s, fmt.Errorf("read taint of %s: %w", session, err)
		}
		if kind.Valid && s.by == nil {
			s.by = &protocol.Taint{Kind: kind.String, Source: source.String}
		}
		if permission.Valid {
			s.allowed[permission.String] = true
		}
	}
	return s, rows.Err()
}

// taintQuery reads a session's taint and what was allowed under it in one
// statement, at every turn's opening: one row for each permission allowed,
// or one with none, each with the taint (NULL when the session has none).
const taintQuery = `SELECT t.kind, t.source, a.permission FROM (SELECT ?1 AS session) k
	LEFT JOIN dots_taint t ON t.session = k.session LEFT JOIN dots_taint_allowed a ON a.session = k.session`

// setTaint records a session's first taint; a later one changes nothing.
func setTaint(ctx context.Context, tx *store.Tx, session string, by protocol.Taint) error {
	if _, err := tx.Exec(ctx, "INSERT INTO dots_taint(session, kind, source) VALUES (?, ?, ?) ON CONFLICT(session) DO NOTHING",
		session, by.Kind, by.Source); err != nil {
		return fmt.Errorf("record taint of %s: %w", session, err)
	}
	return nil
}

// clearTaint ends a session's taint and what was allowed under it (the
// chat's, when it answers).
func clearTaint(ctx context.Context, tx *store.Tx, session string) error {
	if _, err := tx.Exec(ctx, "DELETE FROM dots_taint WHERE session = ?", session); err != nil {
		return fmt.Errorf("clear taint of %s: %w", session, err)
	}
	if _, err := tx.Exec(ctx, "DELETE FROM dots_taint_allowed WHERE session = ?", session); err != nil {
		return fmt.Errorf("clear taint allowances of %s: %w", session, err)
	}
	return nil
}

// allowForTask records "allow for the rest of this task": the approval's
// permission is no longer asked because of taint in its session.
func allowForTask(ctx context.Context, tx *store.Tx, approvalID string) error {
	if _, err := tx.Exec(ctx, `INSERT INTO dots_taint_allowed(session, permission)
		SELECT session, permission FROM dots_approvals WHERE id = ?
		ON CONFLICT(session, permission) DO NOTHING`, approvalID); err != nil {
		return fmt.Errorf("allow approval %s for the task: %w", approvalID, err)
	}
	return nil
}
