package tools

import (
	"bytes"
	"context"
	"fmt"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// find_files and grep run find and grep on the computer, as dot, by argv
// with no shell (ref 8.8), to learn which files can match; grep then reads
// only those through the file routes and matches them itself, so its answer
// follows the one regular expression syntax its description promises (RE2).

const (
	findDefaultLimit = 200
	grepDefaultHead  = 500
)

// captured is the outcome of a helper program.
type captured struct {
	stdout, stderr []byte
	code           int
}

// runCapture runs argv through the relay in the workspace and waits for it,
// at most helperTimeout.
func (r *Runner) runCapture(ctx context.Context, argv []string) (captured, error) {
	j, err := r.runRelay(relaySpec{Argv: argv, Cwd: r.env.Workspace}, strings.Join(argv, " "))
	if err != nil {
		return captured{}, err
	}
	j.closeStdin()
	timer := time.NewTimer(helperTimeout)
	defer timer.Stop()
	select {
	case <-j.done:
	case <-timer.C:
		j.kill()
		<-j.done
		return captured{}, fmt.Errorf("%s took longer than %s and was stopped", argv[0], helperTimeout)
	case <-ctx.Done():
		j.kill()
		<-j.done
		return captured{}, ctx.Err()
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.waitErr != nil {
		return captured{}, fmt.Errorf("the dot-agentd relay failed: %w", j.waitErr)
	}
	return captured{stdout: j.stdout, stderr: j.stderr, code: j.exit}, nil
}

// pruneArgs are find's arguments that skip the build and cache folders.
func pruneArgs() []string {
	args := []string{"("}
	for i, d := range skippedDirs {
		if i > 0 {
			args = append(args, "-o")
		}
		args = append(args, "-name", d)
	}
	return append(args, ")", "-prune", "-o")
}

type found struct {
	rel   string
	dir   bool
	mtime float64
}

func (r *Runner) findFiles(ctx context.Context, a map[string]any) Result {
	root := r.abs(str(a, "path"))
	query := strings.Fields(strings.ToLower(str(a, "query")))
	glob := str(a, "glob")
	kind := str(a, "type")
	limit := int(intArg(a, "limit", findDefaultLimit))
	if glob != "" {
		if _, err := globRegexp(glob); err != nil {
			return fail(fmt.Sprintf("The glob %q does not parse: %v.", glob, err))
		}
	}
	argv := append([]string{"find", root, "-mindepth", "1"}, pruneArgs()...)
	switch kind {
	case "file":
		argv = append(argv, "-type", "f")
	case "dir":
		argv = append(argv, "-type", "d")
	}
	argv = append(argv, "-printf", `%y\t%T@\t%P\0`)
	res, err := r.runCapture(ctx, argv)
	if err != nil {
		return fail(fmt.Sprintf("find could not run: %v.", err))
	}
	if res.code != 0 && len(res.stdout) == 0 {
		return fail(fmt.Sprintf("find failed on %s: %s.", root, strings.TrimSpace(firstLine(string(res.stderr)))))
	}
	var matcher *regexp.Regexp
	if glob != "" {
		matcher, _ = globRegexp(glob)
	}
	var hits []found
	for _, rec := range bytes.Split(res.stdout, []byte{0}) {
		parts := strings.SplitN(string(rec), "\t", 3)
		if len(parts) != 3 || parts[2] == "" {
			continue
		}
		f := found{rel: parts[2], dir: parts[0] == "d"}
		f.mtime, _ = strconv.ParseFloat(parts[1], 64)
		if !matchesQuery(f.rel, query) || matcher != nil && !globMatch(matcher, glob, f.rel) {
			continue
		}
		hits = append(hits, f)
	}
	if len(hits) == 0 {
		return ok(fmt.Sprintf("Nothing under %s matches.", root))
	}
	sort.SliceStable(hits, func(i, j int) bool {
		if hits[i].mtime != hits[j].mtime {
			return hits[i].mtime > hits[j].mtime
		}
		return hits[i].rel < hits[j].rel
	})
	var b strings.Builder
	total := len(hits)
	if total > limit {
		hits = hits[:limit]
	}
	fmt.Fprintf(&b, "%d match(es) under %s, newest first:\n", total, root)
	for _, h := range hits {
		if h.dir {
			fmt.Fprintf(&b, "%s/\n", h.rel)
		} else {
			fmt.Fprintf(&b, "%s\n", h.rel)
		}
	}
	if total > limit {
		fmt.Fprintf(&b, "[%d more not shown; narrow the search or raise limit]\n", total-limit)
	}
	if res.code != 0 {
		b.WriteString("[some folders could not be read]\n")
	}
	return ok(strings.TrimRight(b.String(), "\n"))
}

func matchesQuery(rel string, terms []string) bool {
	low := strings.ToLower(rel)
	for _, t := range terms {
		if !strings.Contains(low, t) {
			return false
		}
	}
	return true
}

// globMatch matches a glob with a slash against the relative path, and one
// without against the name.
func globMatch(re *regexp.Regexp, glob, rel string) bool {
	if strings.Contains(glob, "/") {
		return re.MatchString(rel)
	}
	return re.MatchString(path.Base(rel))
}

// globRegexp compiles a glob: * and ? within a name, ** across folders,
// [...] classes, {a,b} alternatives.
func globRegexp(glob string) (*regexp.Regexp, error) {
	var b strings.Builder
	b.WriteString("^")
	depth := 0
	for i := 0; i < len(glob); i++ {
		c := glob[i]
		switch c {
		case '*':
			if i+1 < len(glob) && glob[i+1] == '*' {
				i++
				if i+1 < len(glob) && glob[i+1] == '/' {
					i++
					b.WriteString("(?:.*/)?")
				} else {
					b.WriteString(".*")
				}
			} else {
				b.WriteString("[^/]*")
			}
		case '?':
			b.WriteString("[^/]")
		case '[':
			j := strings.IndexByte(glob[i+1:], ']')
			if j < 0 {
				return nil, fmt.Errorf("a [ has no ]")
			}
			class := glob[i+1 : i+1+j]
			if strings.HasPrefix(class, "!") {
				class = "^" + class[1:]
			}
			b.WriteString("[" + strings.ReplaceAll(class, `\`, `\\`) + "]")
			i += j + 1
		case '{':
			depth++
			b.WriteString("(?:")
		case '}':
			if depth == 0 {
				return nil, fmt.Errorf("a } has no {")
			}
			depth--
			b.WriteString(")")
		case ',':
			if depth > 0 {
				b.WriteString("|")
			} else {
				b.WriteString(",")
			}
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	if depth != 0 {
		return nil, fmt.Errorf("a { has no }")
	}
	b.WriteString("$")
	return regexp.Compile(b.String())
}

func (r *Runner) grep(ctx context.Context, a map[string]any) Result {
	pattern := str(a, "pattern")
	if pattern == "" {
		return fail("The pattern is empty.")
	}
	root := r.abs(str(a, "path"))
	glob := str(a, "glob")
	fixed := boolArg(a, "fixed_strings")
	icase := boolArg(a, "case_insensitive")
	mode := str(a, "output_mode")
	if mode == "" {
		mode = "content"
	}
	contextLines := int(intArg(a, "context", 0))
	head := int(intArg(a, "head_limit", grepDefaultHead))

	expr := pattern
	if fixed {
		expr = regexp.QuoteMeta(pattern)
	}
	if icase {
		expr = "(?i)" + expr
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		return fail(fmt.Sprintf("The pattern does not compile as a regular expression (RE2 syntax): %v.", err))
	}
	var globRe *regexp.Regexp
	if glob != "" {
		if globRe, err = globRegexp(glob); err != nil {
			return fail(fmt.Sprintf("The glob %q does not parse: %v.", glob, err))
		}
	}

	candidates, isFile, err := r.grepCandidates(ctx, root, pattern, fixed, icase, glob)
	if err != nil {
		return fail(fmt.Sprintf("grep could not search %s: %v.", root, err))
	}
	var b strings.Builder
	lines, files, matches := 0, 0, 0
	cut := false
	for _, rel := range candidates {
		if cut {
			break
		}
		if globRe != nil && !isFile && !globMatch(globRe, glob, rel) {
			continue
		}
		full := root
		if !isFile {
			full = path.Join(root, rel)
		}
		data, err := r.files.Read(ctx, full)
		if err != nil || isBinary(data) {
			continue
		}
		fileLines := splitLines(string(data))
		var hitAt []int
		for i, l := range fileLines {
			if re.MatchString(strings.TrimRight(l, "\r")) {
				hitAt = append(hitAt, i)
			}
		}
		if len(hitAt) == 0 {
			continue
		}
		files++
		matches += len(hitAt)
		switch mode {
		case "files_with_matches":
			if lines >= head {
				cut = true
				break
			}
			fmt.Fprintf(&b, "%s\n", rel)
			lines++
		case "count":
			if lines >= head {
				cut = true
				break
			}
			fmt.Fprintf(&b, "%s:%d\n", rel, len(hitAt))
			lines++
		default:
			shown := -1
			for _, h := range hitAt {
				from, to := h-contextLines, h+contextLines
				if from < 0 {
					from = 0
				}
				if to >= len(fileLines) {
					to = len(fileLines) - 1
				}
				if contextLines > 0 && shown >= 0 && from > shown+1 {
					b.WriteString("--\n")
				}
				if from <= shown {
					from = shown + 1
				}
				for k := from; k <= to; k++ {
					if lines >= head {
						cut = true
						break
					}
					sep := "-"
					if re.MatchString(strings.TrimRight(fileLines[k], "\r")) {
						sep = ":"
					}
					fmt.Fprintf(&b, "%s%s%d%s%s\n", rel, sep, k+1, sep, strings.TrimRight(fileLines[k], "\r"))
					lines++
					shown = k
				}
				if cut {
					break
				}
			}
		}
	}
	if files == 0 {
		return ok(fmt.Sprintf("No matches for %q under %s.", pattern, root))
	}
	if cut {
		fmt.Fprintf(&b, "[output cut at %d lines; narrow the search, use a glob or raise head_limit]\n", head)
	} else {
		fmt.Fprintf(&b, "[%d match(es) in %d file(s)]\n", matches, files)
	}
	return ok(strings.TrimRight(b.String(), "\n"))
}

// grepCandidates asks grep on the computer which files can match, as paths
// relative to root (root itself when it is a file).
func (r *Runner) grepCandidates(ctx context.Context, root, pattern string, fixed, icase bool, glob string) ([]string, bool, error) {
	build := func(dialect string) []string {
		argv := []string{"grep", "-r", "-l", "-I", "-Z", dialect}
		if icase {
			argv = append(argv, "-i")
		}
		for _, d := range skippedDirs {
			argv = append(argv, "--exclude-dir="+d)
		}
		if glob != "" && !strings.Contains(glob, "/") && !strings.Contains(glob, "{") {
			argv = append(argv, "--include="+glob)
		}
		return append(argv, "-e", pattern, "--", root)
	}
	dialect := "-P" // PCRE is the closest of grep's dialects to RE2 (\d, \s, non-greedy)
	if fixed {
		dialect = "-F"
	}
	res, err := r.runCapture(ctx, build(dialect))
	if err != nil {
		return nil, false, err
	}
	if res.code == 2 && dialect == "-P" && len(res.stdout) == 0 {
		// A grep built without PCRE, or a pattern PCRE refuses: ask again in
		// the extended dialect.
		if res, err = r.runCapture(ctx, build("-E")); err != nil {
			return nil, false, err
		}
	}
	if res.code == 2 && len(res.stdout) == 0 {
		return nil, false, fmt.Errorf("%s", strings.TrimSpace(firstLine(string(res.stderr))))
	}
	isFile := false
	var out []string
	for _, p := range bytes.Split(res.stdout, []byte{0}) {
		s := string(p)
		if s == "" {
			continue
		}
		if s == root {
			isFile = true
			out = append(out, path.Base(root))
			continue
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(s, root), "/")
		out = append(out, rel)
	}
	sort.Strings(out)
	return out, isFile, nil
}
