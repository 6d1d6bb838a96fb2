package tools

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/invisible-dots/invisible-dots/guest/agentd/fileclient"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// The file tools read and write through the file routes of dot-agentd's
// local socket (ref 8.8), keeping nanobot's line windows, read-before-write
// check, fuzzy edit matching and diff summaries.

const (
	readDefaultLimit  = 2000
	listDefaultMax    = 500
	binarySniffBytes  = 8000
	helperTimeout     = 60 * time.Second
	diffMaxLines      = 400
	maxPatchFileBytes = protocol.FilesMaxPutBytes
)

// skippedDirs are the build and cache folders listings and searches skip.
var skippedDirs = []string{
	".git", ".hg", ".svn", "node_modules", "__pycache__", ".venv", "venv",
	".mypy_cache", ".pytest_cache", ".ruff_cache", ".tox", ".cache", ".next", ".idea",
}

func hashOf(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func (r *Runner) markSeen(p string, content []byte) {
	r.mu.Lock()
	r.seen[p] = hashOf(content)
	r.mu.Unlock()
}

func (r *Runner) seenHash(p string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen[p]
}

func isBinary(b []byte) bool {
	head := b
	if len(head) > binarySniffBytes {
		head = head[:binarySniffBytes]
	}
	if bytes.IndexByte(head, 0) >= 0 {
		return true
	}
	// A multi-byte character may be cut at the sniff's end.
	for i := 0; i < 4 && len(head) > 0 && !utf8.Valid(head); i++ {
		head = head[:len(head)-1]
	}
	return !utf8.Valid(head)
}

// fileRefusal turns a file route's error into a sentence for the model.
func fileRefusal(err error) Result {
	return fail(capitalize(err.Error()) + ".")
}

func (r *Runner) readFile(ctx context.Context, a map[string]any) Result {
	p := r.abs(str(a, "path"))
	data, err := r.files.Read(ctx, p)
	if err != nil {
		if fileclient.HasCode(err, protocol.ErrIsDirectory) {
			return fail(fmt.Sprintf("%s is a directory; list_dir lists it.", p))
		}
		return fileRefusal(err)
	}
	if isBinary(data) {
		return ok(fmt.Sprintf("%s is a binary file (%d bytes); read_file shows text only.", p, len(data)))
	}
	r.markSeen(p, data)
	if len(data) == 0 {
		return ok(fmt.Sprintf("%s is empty.", p))
	}
	lines := splitLines(string(data))
	offset := int(intArg(a, "offset", 1))
	limit := int(intArg(a, "limit", readDefaultLimit))
	if offset > len(lines) {
		return fail(fmt.Sprintf("%s has %d lines; offset %d is past its end.", p, len(lines), offset))
	}
	end := offset - 1 + limit
	if end > len(lines) {
		end = len(lines)
	}
	var b strings.Builder
	for i := offset - 1; i < end; i++ {
		fmt.Fprintf(&b, "%6d\t%s\n", i+1, strings.TrimRight(lines[i], "\r"))
	}
	if offset > 1 || end < len(lines) {
		fmt.Fprintf(&b, "[lines %d-%d of %d", offset, end, len(lines))
		if end < len(lines) {
			fmt.Fprintf(&b, "; read on with offset %d", end+1)
		}
		b.WriteString("]\n")
	}
	return ok(strings.TrimRight(b.String(), "\n"))
}

// splitLines splits text into lines without their "\n"; a final newline
// ends the last line rather than starting an empty one.
func splitLines(s string) []string {
	s = strings.TrimSuffix(s, "\n")
	return strings.Split(s, "\n")
}

func (r *Runner) listDir(ctx context.Context, a map[string]any) Result {
	root := r.abs(str(a, "path"))
	recursive := boolArg(a, "recursive")
	maxEntries := int(intArg(a, "max_entries", listDefaultMax))
	var b strings.Builder
	count := 0
	truncated := false
	type dir struct{ abs, rel string }
	queue := []dir{{root, ""}}
	for len(queue) > 0 && !truncated {
		d := queue[0]
		queue = queue[1:]
		entries, err := r.files.List(ctx, d.abs)
		if err != nil {
			if d.rel == "" {
				if fileclient.HasCode(err, protocol.ErrNotDirectory) {
					return fail(fmt.Sprintf("%s is a file, not a directory; read_file reads it.", root))
				}
				return fileRefusal(err)
			}
			fmt.Fprintf(&b, "%s/ (not listed: %v)\n", d.rel, err)
			continue
		}
		for _, e := range entries {
			if count >= maxEntries {
				truncated = true
				break
			}
			rel := e.Name
			if d.rel != "" {
				rel = d.rel + "/" + e.Name
			}
			count++
			switch e.Type {
			case protocol.EntryDir:
				if containsStr(skippedDirs, e.Name) {
					fmt.Fprintf(&b, "%s/ (skipped)\n", rel)
					continue
				}
				fmt.Fprintf(&b, "%s/\n", rel)
				if recursive {
					queue = append(queue, dir{path.Join(d.abs, e.Name), rel})
				}
			case protocol.EntryFile:
				fmt.Fprintf(&b, "%s (%s)\n", rel, humanSize(e.Size))
			default:
				fmt.Fprintf(&b, "%s (other)\n", rel)
			}
		}
	}
	if count == 0 {
		return ok(fmt.Sprintf("%s is empty.", root))
	}
	head := fmt.Sprintf("%s:\n", root)
	if truncated {
		b.WriteString(fmt.Sprintf("[stopped at %d entries; list a subdirectory or raise max_entries]\n", maxEntries))
	}
	return ok(strings.TrimRight(head+b.String(), "\n"))
}

func humanSize(n int64) string {
	switch {
	case n < 1024:
		return fmt.Sprintf("%d B", n)
	case n < 1024*1024:
		return fmt.Sprintf("%.1f KiB", float64(n)/1024)
	case n < 1024*1024*1024:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1024*1024))
	default:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1024*1024*1024))
	}
}

// putFile writes a file, making its folders first when they are missing.
func (r *Runner) putFile(ctx context.Context, p string, data []byte) error {
	err := r.files.Write(ctx, p, data)
	if err == nil || !fileclient.HasCode(err, protocol.ErrNotFound) {
		return err
	}
	dir := path.Dir(p)
	res, rerr := r.runCapture(ctx, []string{"mkdir", "-p", "--", dir})
	if rerr != nil {
		return rerr
	}
	if res.code != 0 {
		return fmt.Errorf("the folder %s could not be made: %s", dir, strings.TrimSpace(string(res.stderr)))
	}
	return r.files.Write(ctx, p, data)
}

func (r *Runner) writeFile(ctx context.Context, a map[string]any) Result {
	p := r.abs(str(a, "path"))
	content := []byte(str(a, "content"))
	old, err := r.files.Read(ctx, p)
	exists := err == nil
	switch {
	case err == nil:
		if h := r.seenHash(p); h != hashOf(old) {
			if h == "" {
				return fail(fmt.Sprintf("%s exists and has not been read; read it with read_file first, so nothing is overwritten unseen (edit_file changes part of it).", p))
			}
			return fail(fmt.Sprintf("%s changed since it was last read; read it again with read_file before overwriting it.", p))
		}
	case fileclient.HasCode(err, protocol.ErrNotFound):
	case fileclient.HasCode(err, protocol.ErrIsDirectory):
		return fail(fmt.Sprintf("%s is a directory.", p))
	default:
		return fileRefusal(err)
	}
	if err := r.putFile(ctx, p, content); err != nil {
		return fileRefusal(err)
	}
	r.markSeen(p, content)
	if !exists {
		return ok(fmt.Sprintf("Created %s (%d bytes, %d lines).", p, len(content), lineCount(content)))
	}
	d := diffSummary(p, string(old), string(content))
	return ok(fmt.Sprintf("Wrote %s (%d bytes, %d lines).\n%s", p, len(content), lineCount(content), d))
}

func lineCount(b []byte) int {
	if len(b) == 0 {
		return 0
	}
	n := bytes.Count(b, []byte("\n"))
	if b[len(b)-1] != '\n' {
		n++
	}
	return n
}

func (r *Runner) editFile(ctx context.Context, a map[string]any) Result {
	p := r.abs(str(a, "path"))
	old, err := r.files.Read(ctx, p)
	if err != nil {
		if fileclient.HasCode(err, protocol.ErrNotFound) {
			return fail(fmt.Sprintf("%s does not exist; write_file creates a file.", p))
		}
		return fileRefusal(err)
	}
	if isBinary(old) {
		return fail(fmt.Sprintf("%s is a binary file; edit_file changes text only.", p))
	}
	updated, n, err := replaceText(string(old), str(a, "old_text"), str(a, "new_text"), boolArg(a, "replace_all"))
	if err != nil {
		return fail(fmt.Sprintf("%s: %v.", p, err))
	}
	if err := r.putFile(ctx, p, []byte(updated)); err != nil {
		return fileRefusal(err)
	}
	r.markSeen(p, []byte(updated))
	return ok(fmt.Sprintf("Edited %s: replaced %d occurrence(s).\n%s", p, n, diffSummary(p, string(old), updated)))
}

// patchEdit is one edit of apply_patch.
type patchEdit struct {
	path, action, oldText, newText string
	replaceAll                     bool
}

func (r *Runner) applyPatch(ctx context.Context, a map[string]any) Result {
	raw, _ := a["edits"].([]any)
	edits := make([]patchEdit, 0, len(raw))
	for _, e := range raw {
		m, _ := e.(map[string]any)
		edits = append(edits, patchEdit{
			path: r.abs(str(m, "path")), action: str(m, "action"),
			oldText: str(m, "old_text"), newText: str(m, "new_text"), replaceAll: boolArg(m, "replace_all"),
		})
	}
	dry := boolArg(a, "dry_run")

	// Every edit is applied in memory first; nothing is written unless all
	// of them apply.
	type fileState struct {
		orig, cur string
		existed   bool
	}
	states := map[string]*fileState{}
	var order []string
	for i, e := range edits {
		where := fmt.Sprintf("Edit %d (%s %s)", i+1, e.action, e.path)
		st, loaded := states[e.path]
		if !loaded {
			data, err := r.files.Read(ctx, e.path)
			switch {
			case err == nil:
				if isBinary(data) {
					return fail(fmt.Sprintf("%s: the file is binary. Nothing was written.", where))
				}
				st = &fileState{orig: string(data), cur: string(data), existed: true}
			case fileclient.HasCode(err, protocol.ErrNotFound):
				st = &fileState{}
			default:
				return fail(fmt.Sprintf("%s: %v. Nothing was written.", where, err))
			}
			states[e.path] = st
			order = append(order, e.path)
		}
		switch e.action {
		case "add":
			if st.existed || st.cur != "" {
				return fail(fmt.Sprintf("%s: the file exists; use replace to change it. Nothing was written.", where))
			}
			st.cur = e.newText
			if st.cur == "" {
				return fail(fmt.Sprintf("%s: new_text is empty; a new file needs content. Nothing was written.", where))
			}
		default: // replace
			if !st.existed {
				return fail(fmt.Sprintf("%s: the file does not exist; use add to create it. Nothing was written.", where))
			}
			updated, _, err := replaceText(st.cur, e.oldText, e.newText, e.replaceAll)
			if err != nil {
				return fail(fmt.Sprintf("%s: %v. Nothing was written.", where, err))
			}
			st.cur = updated
		}
	}

	var b strings.Builder
	if dry {
		fmt.Fprintf(&b, "Dry run: nothing was written. %d edit(s) to %d file(s) would apply:\n", len(edits), len(order))
	} else {
		fmt.Fprintf(&b, "Applied %d edit(s) to %d file(s):\n", len(edits), len(order))
	}
	var written []string
	for _, p := range order {
		st := states[p]
		if !dry {
			if err := r.putFile(ctx, p, []byte(st.cur)); err != nil {
				msg := fmt.Sprintf("Writing %s failed: %v.", p, err)
				if len(written) > 0 {
					msg += " Already written: " + strings.Join(written, ", ") + "."
				} else {
					msg += " Nothing was written."
				}
				return Result{Text: msg}
			}
			r.markSeen(p, []byte(st.cur))
			written = append(written, p)
		}
		if st.existed {
			b.WriteString(diffSummary(p, st.orig, st.cur))
		} else {
			fmt.Fprintf(&b, "%s: new file, %d lines\n", p, lineCount([]byte(st.cur)))
		}
	}
	return ok(strings.TrimRight(b.String(), "\n"))
}
