package tools

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestReadFile(t *testing.T) {
	f := newFixture(t)
	var lines []string
	for i := 1; i <= 5; i++ {
		lines = append(lines, fmt.Sprintf("line %d", i))
	}
	p := f.write(t, "notes.txt", strings.Join(lines, "\n")+"\n")
	f.write(t, "crlf.txt", "a\r\nb\r\n")
	f.write(t, "empty.txt", "")
	f.write(t, "blob.bin", "PK\x03\x04\x00\x00binary")
	f.write(t, "forbidden/secret.txt", "x")
	tests := map[string]struct {
		args   map[string]any
		wantOK bool
		want   string
	}{
		"whole file, numbered": {map[string]any{"path": "notes.txt"}, true,
			"     1\tline 1\n     2\tline 2\n     3\tline 3\n     4\tline 4\n     5\tline 5"},
		"a window": {map[string]any{"path": p, "offset": 2, "limit": 2}, true,
			"     2\tline 2\n     3\tline 3\n[lines 2-3 of 5; read on with offset 4]"},
		"the window's tail": {map[string]any{"path": "notes.txt", "offset": 4}, true,
			"     4\tline 4\n     5\tline 5\n[lines 4-5 of 5]"},
		"past the end":     {map[string]any{"path": "notes.txt", "offset": 9}, false, p + " has 5 lines; offset 9 is past its end."},
		"crlf shown clean": {map[string]any{"path": "crlf.txt"}, true, "     1\ta\n     2\tb"},
		"empty":            {map[string]any{"path": "empty.txt"}, true, filepath.Join(f.workspace, "empty.txt") + " is empty."},
		"binary":           {map[string]any{"path": "blob.bin"}, true, filepath.Join(f.workspace, "blob.bin") + " is a binary file (12 bytes); read_file shows text only."},
		"missing":          {map[string]any{"path": "nope.txt"}, false, filepath.Join(f.workspace, "nope.txt") + " does not exist."},
		"a directory":      {map[string]any{"path": "."}, false, f.workspace + " is a directory; list_dir lists it."},
		"dot may not open": {map[string]any{"path": "forbidden/secret.txt"}, false, "The dot user may not open " + filepath.Join(f.workspace, "forbidden/secret.txt") + "."},
		"home-relative ~/": {map[string]any{"path": "~/workspace/crlf.txt"}, true, "     1\ta\n     2\tb"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			res := f.run(t, "read_file", tc.args)
			if res.OK != tc.wantOK {
				t.Errorf("read_file %v ok = %v, want %v (%q)", tc.args, res.OK, tc.wantOK, res.Text)
			}
			if d := cmp.Diff(tc.want, res.Text); d != "" {
				t.Errorf("read_file %v (-want +got):\n%s", tc.args, d)
			}
		})
	}
}

func TestWriteFile(t *testing.T) {
	f := newFixture(t)
	// A new file in folders that do not exist yet.
	res := f.run(t, "write_file", map[string]any{"path": "deep/er/new.txt", "content": "one\ntwo\n"})
	if !res.OK || !strings.HasPrefix(res.Text, "Created ") {
		t.Fatalf("write a new file: %+v", res)
	}
	if got := f.read(t, "deep/er/new.txt"); got != "one\ntwo\n" {
		t.Errorf("content = %q", got)
	}
	// What the Dot wrote it has seen: it may write it again.
	res = f.run(t, "write_file", map[string]any{"path": "deep/er/new.txt", "content": "one\n2\n"})
	if !res.OK || !strings.Contains(res.Text, "+1 -1 lines") || !strings.Contains(res.Text, "-two\n+2") {
		t.Errorf("overwrite own file: %+v", res)
	}

	// A file it never read is not overwritten.
	f.write(t, "theirs.txt", "precious\n")
	res = f.run(t, "write_file", map[string]any{"path": "theirs.txt", "content": "gone"})
	if res.OK || !strings.Contains(res.Text, "has not been read; read it with read_file first") {
		t.Errorf("overwrite unread: %+v", res)
	}
	if got := f.read(t, "theirs.txt"); got != "precious\n" {
		t.Errorf("the unread file changed: %q", got)
	}
	// After reading it, it may.
	f.run(t, "read_file", map[string]any{"path": "theirs.txt"})
	// ...unless it changed since.
	f.write(t, "theirs.txt", "precious, edited by someone\n")
	res = f.run(t, "write_file", map[string]any{"path": "theirs.txt", "content": "gone"})
	if res.OK || !strings.Contains(res.Text, "changed since it was last read") {
		t.Errorf("overwrite changed: %+v", res)
	}
	f.run(t, "read_file", map[string]any{"path": "theirs.txt"})
	if res := f.run(t, "write_file", map[string]any{"path": "theirs.txt", "content": "mine\n"}); !res.OK {
		t.Errorf("overwrite after reading: %+v", res)
	}
	if got := f.read(t, "theirs.txt"); got != "mine\n" {
		t.Errorf("content = %q", got)
	}
	if res := f.run(t, "write_file", map[string]any{"path": "forbidden/x", "content": "x"}); res.OK || !strings.Contains(res.Text, "may not open") {
		t.Errorf("write where dot may not: %+v", res)
	}
}

func TestEditFile(t *testing.T) {
	tests := map[string]struct {
		content  string
		args     map[string]any
		wantOK   bool
		want     string // the file after
		contains string // in the answer
	}{
		"exact and unique": {
			"a\nb\nc\n", map[string]any{"old_text": "b", "new_text": "B"}, true, "a\nB\nc\n", "-b\n+B",
		},
		"more than once needs context": {
			"x = 1\nx = 1\n", map[string]any{"old_text": "x = 1", "new_text": "x = 2"}, false, "x = 1\nx = 1\n", "occurs 2 times",
		},
		"replace_all": {
			"x = 1\nx = 1\n", map[string]any{"old_text": "x = 1", "new_text": "x = 2", "replace_all": true}, true, "x = 2\nx = 2\n", "replaced 2 occurrence(s)",
		},
		"trailing whitespace tolerated": {
			"def f():   \n    return 1\n", map[string]any{"old_text": "def f():\n    return 1", "new_text": "def f():\n    return 2"}, true, "def f():\n    return 2\n", "replaced 1",
		},
		"indentation tolerated and kept": {
			"class A:\n    def f(self):\n        return 1\n",
			map[string]any{"old_text": "def f(self):\n    return 1", "new_text": "def f(self):\n    return 2"},
			true, "class A:\n    def f(self):\n        return 2\n", "replaced 1",
		},
		"crlf file keeps its line ends": {
			"one\r\ntwo\r\n", map[string]any{"old_text": "one\ntwo", "new_text": "one\n2"}, true, "one\r\n2\r\n", "replaced 1",
		},
		"not found": {
			"a\n", map[string]any{"old_text": "zzz", "new_text": "y"}, false, "a\n", "not found, not even ignoring whitespace",
		},
		"same text": {
			"a\n", map[string]any{"old_text": "a", "new_text": "a"}, false, "a\n", "the same",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			f.write(t, "f.txt", tc.content)
			tc.args["path"] = "f.txt"
			res := f.run(t, "edit_file", tc.args)
			if res.OK != tc.wantOK || !strings.Contains(res.Text, tc.contains) {
				t.Errorf("edit_file %v on %q: %+v; want ok=%v and %q", tc.args, tc.content, res, tc.wantOK, tc.contains)
			}
			if d := cmp.Diff(tc.want, f.read(t, "f.txt")); d != "" {
				t.Errorf("file after (-want +got):\n%s", d)
			}
		})
	}
	f := newFixture(t)
	if res := f.run(t, "edit_file", map[string]any{"path": "none.txt", "old_text": "a", "new_text": "b"}); res.OK || !strings.Contains(res.Text, "does not exist; write_file creates a file") {
		t.Errorf("edit a missing file: %+v", res)
	}
}

func TestApplyPatch(t *testing.T) {
	f := newFixture(t)
	f.write(t, "a.txt", "alpha\nbeta\n")
	f.write(t, "b.txt", "one\n")
	edits := []any{
		map[string]any{"path": "a.txt", "action": "replace", "old_text": "beta", "new_text": "BETA"},
		map[string]any{"path": "c/new.txt", "action": "add", "new_text": "fresh\n"},
		map[string]any{"path": "a.txt", "action": "replace", "old_text": "alpha", "new_text": "ALPHA"},
	}
	res := f.run(t, "apply_patch", map[string]any{"edits": edits, "dry_run": true})
	if !res.OK || !strings.HasPrefix(res.Text, "Dry run: nothing was written. 3 edit(s) to 2 file(s) would apply") ||
		!strings.Contains(res.Text, "-alpha\n-beta\n+ALPHA\n+BETA") || !strings.Contains(res.Text, "new.txt: new file, 1 lines") {
		t.Errorf("dry run: %+v", res)
	}
	if f.read(t, "a.txt") != "alpha\nbeta\n" || f.agentd.putCount() != 0 {
		t.Errorf("the dry run wrote: a.txt = %q, %d puts", f.read(t, "a.txt"), f.agentd.putCount())
	}
	if _, err := os.Stat(filepath.Join(f.workspace, "c")); err == nil {
		t.Errorf("the dry run made a folder")
	}

	res = f.run(t, "apply_patch", map[string]any{"edits": edits})
	if !res.OK || !strings.HasPrefix(res.Text, "Applied 3 edit(s) to 2 file(s)") {
		t.Fatalf("apply: %+v", res)
	}
	if f.read(t, "a.txt") != "ALPHA\nBETA\n" || f.read(t, "c/new.txt") != "fresh\n" {
		t.Errorf("after apply: a=%q new=%q", f.read(t, "a.txt"), f.read(t, "c/new.txt"))
	}

	// All or nothing: the second edit fails, so the first is not written.
	puts := f.agentd.putCount()
	res = f.run(t, "apply_patch", map[string]any{"edits": []any{
		map[string]any{"path": "b.txt", "action": "replace", "old_text": "one", "new_text": "ONE"},
		map[string]any{"path": "a.txt", "action": "replace", "old_text": "missing", "new_text": "x"},
	}})
	if res.OK || !strings.HasPrefix(res.Text, "Edit 2 (replace "+filepath.Join(f.workspace, "a.txt")+")") || !strings.HasSuffix(res.Text, "Nothing was written.") {
		t.Errorf("failing patch: %+v", res)
	}
	if f.read(t, "b.txt") != "one\n" || f.agentd.putCount() != puts {
		t.Errorf("a failing patch wrote something")
	}
	for name, e := range map[string]map[string]any{
		"add over an existing file": {"path": "b.txt", "action": "add", "new_text": "x"},
		"replace in a missing file": {"path": "zz.txt", "action": "replace", "old_text": "a", "new_text": "b"},
	} {
		if res := f.run(t, "apply_patch", map[string]any{"edits": []any{e}}); res.OK || !strings.HasSuffix(res.Text, "Nothing was written.") {
			t.Errorf("%s: %+v", name, res)
		}
	}
}

func TestListDir(t *testing.T) {
	f := newFixture(t)
	f.write(t, "a.txt", "12345")
	f.write(t, "src/main.go", "package main\n")
	f.write(t, ".git/HEAD", "ref")
	f.write(t, "src/node_modules/x/index.js", "x")
	res := f.run(t, "list_dir", map[string]any{})
	want := f.workspace + ":\n.git/ (skipped)\na.txt (5 B)\nsrc/"
	if d := cmp.Diff(want, res.Text); d != "" || !res.OK {
		t.Errorf("list_dir (-want +got):\n%s", d)
	}
	res = f.run(t, "list_dir", map[string]any{"recursive": true})
	want = f.workspace + ":\n.git/ (skipped)\na.txt (5 B)\nsrc/\nsrc/main.go (13 B)\nsrc/node_modules/ (skipped)"
	if d := cmp.Diff(want, res.Text); d != "" {
		t.Errorf("list_dir recursive (-want +got):\n%s", d)
	}
	res = f.run(t, "list_dir", map[string]any{"recursive": true, "max_entries": 2})
	if !strings.HasSuffix(res.Text, "[stopped at 2 entries; list a subdirectory or raise max_entries]") {
		t.Errorf("list_dir bounded: %q", res.Text)
	}
	if res := f.run(t, "list_dir", map[string]any{"path": "a.txt"}); res.OK || !strings.Contains(res.Text, "is a file, not a directory") {
		t.Errorf("list_dir of a file: %+v", res)
	}
	if res := f.run(t, "list_dir", map[string]any{"path": "nope"}); res.OK || !strings.Contains(res.Text, "does not exist") {
		t.Errorf("list_dir of nothing: %+v", res)
	}
}

func TestFindFiles(t *testing.T) {
	f := newFixture(t)
	old := time.Now().Add(-time.Hour)
	for i, rel := range []string{"docs/Invoice-2026.pdf", "docs/notes.md", "src/app/main.go", "src/app/util.go", ".git/config", "node_modules/x/invoice.js"} {
		p := f.write(t, rel, "x")
		_ = os.Chtimes(p, old.Add(time.Duration(i)*time.Minute), old.Add(time.Duration(i)*time.Minute))
	}
	tests := map[string]struct {
		args map[string]any
		want string
	}{
		"terms in the path, any case":       {map[string]any{"query": "invoice"}, "1 match(es) under " + f.workspace + ", newest first:\ndocs/Invoice-2026.pdf"},
		"glob across folders, newest first": {map[string]any{"glob": "**/*.go"}, "2 match(es) under " + f.workspace + ", newest first:\nsrc/app/util.go\nsrc/app/main.go"},
		"glob on the name":                  {map[string]any{"glob": "*.{md,pdf}"}, "2 match(es) under " + f.workspace + ", newest first:\ndocs/notes.md\ndocs/Invoice-2026.pdf"},
		"directories":                       {map[string]any{"type": "dir", "query": "app"}, "1 match(es) under " + f.workspace + ", newest first:\nsrc/app/"},
		"under a path, bounded":             {map[string]any{"path": "src", "type": "file", "limit": 1}, "2 match(es) under " + filepath.Join(f.workspace, "src") + ", newest first:\napp/util.go\n[1 more not shown; narrow the search or raise limit]"},
		"nothing":                           {map[string]any{"query": "zzz"}, "Nothing under " + f.workspace + " matches."},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			res := f.run(t, "find_files", tc.args)
			if d := cmp.Diff(tc.want, res.Text); d != "" || !res.OK {
				t.Errorf("find_files %v ok=%v (-want +got):\n%s", tc.args, res.OK, d)
			}
		})
	}
	if res := f.run(t, "find_files", map[string]any{"glob": "[abc"}); res.OK || !strings.Contains(res.Text, "does not parse") {
		t.Errorf("bad glob: %+v", res)
	}
}

func TestGrep(t *testing.T) {
	f := newFixture(t)
	f.write(t, "a.go", "package a\n\nfunc A() {} // TODO: test\nvar x = 1\n")
	f.write(t, "b/b.py", "# todo later\nprint(1+1)\n")
	f.write(t, "b/c.txt", "nothing here\n")
	f.write(t, ".git/x", "TODO in git\n")
	f.write(t, "bin.dat", "TODO\x00\x01")
	f.write(t, "gap.txt", "m1\nx\nx\nx\nm2\n")
	tests := map[string]struct {
		args   map[string]any
		wantOK bool
		want   string
	}{
		"content with line numbers":          {map[string]any{"pattern": "TODO"}, true, "a.go:3:func A() {} // TODO: test\n[1 match(es) in 1 file(s)]"},
		"any case":                           {map[string]any{"pattern": "todo", "case_insensitive": true}, true, "a.go:3:func A() {} // TODO: test\nb/b.py:1:# todo later\n[2 match(es) in 2 file(s)]"},
		"context lines":                      {map[string]any{"pattern": `^var`, "context": 1}, true, "a.go-3-func A() {} // TODO: test\na.go:4:var x = 1\n[1 match(es) in 1 file(s)]"},
		"context groups apart are separated": {map[string]any{"pattern": `^(package|var)`, "path": "a.go", "context": 0}, true, "a.go:1:package a\na.go:4:var x = 1\n[2 match(es) in 1 file(s)]"},
		"context groups":                     {map[string]any{"pattern": `^m`, "path": "gap.txt", "context": 1}, true, "gap.txt:1:m1\ngap.txt-2-x\n--\ngap.txt-4-x\ngap.txt:5:m2\n[2 match(es) in 1 file(s)]"},
		"adjacent context groups merge":      {map[string]any{"pattern": `^(package|var)`, "path": "a.go", "context": 1}, true, "a.go:1:package a\na.go-2-\na.go-3-func A() {} // TODO: test\na.go:4:var x = 1\n[2 match(es) in 1 file(s)]"},
		"RE2 classes":                        {map[string]any{"pattern": `\d\+\d`}, true, "b/b.py:2:print(1+1)\n[1 match(es) in 1 file(s)]"},
		"fixed strings":                      {map[string]any{"pattern": "1+1", "fixed_strings": true}, true, "b/b.py:2:print(1+1)\n[1 match(es) in 1 file(s)]"},
		"files with matches":                 {map[string]any{"pattern": "(?i)todo", "output_mode": "files_with_matches"}, true, "a.go\nb/b.py\n[2 match(es) in 2 file(s)]"},
		"count":                              {map[string]any{"pattern": "[a-z]", "output_mode": "count", "path": "b"}, true, "b.py:2\nc.txt:1\n[3 match(es) in 2 file(s)]"},
		"glob filter":                        {map[string]any{"pattern": "o", "glob": "*.py", "output_mode": "files_with_matches"}, true, "b/b.py\n[1 match(es) in 1 file(s)]"},
		"one file":                           {map[string]any{"pattern": "print", "path": "b/b.py"}, true, "b.py:2:print(1+1)\n[1 match(es) in 1 file(s)]"},
		"head limit":                         {map[string]any{"pattern": ".", "path": "a.go", "head_limit": 2}, true, "a.go:1:package a\na.go:3:func A() {} // TODO: test\n[output cut at 2 lines; narrow the search, use a glob or raise head_limit]"},
		"no match":                           {map[string]any{"pattern": "zzz"}, true, `No matches for "zzz" under ` + f.workspace + "."},
		"a pattern that does not compile":    {map[string]any{"pattern": "a(b"}, false, "The pattern does not compile as a regular expression (RE2 syntax): error parsing regexp: missing closing ): `a(b`."},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			res := f.run(t, "grep", tc.args)
			if res.OK != tc.wantOK {
				t.Errorf("grep %v ok = %v", tc.args, res.OK)
			}
			if d := cmp.Diff(tc.want, res.Text); d != "" {
				t.Errorf("grep %v (-want +got):\n%s", tc.args, d)
			}
		})
	}
	// grep and find run on the computer by argv, no shell.
	log, _ := os.ReadFile(f.relayLog)
	if !strings.Contains(string(log), "-- grep -r -l -I -Z -P") {
		t.Errorf("relay log lacks the grep argv:\n%s", log)
	}
}
