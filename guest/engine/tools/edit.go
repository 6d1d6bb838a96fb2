package tools

import (
	"errors"
	"fmt"
	"strings"
)

// replaceText replaces oldText with newText in content: the exact text
// first; when it does not occur, the same lines compared without trailing
// whitespace, then without indentation (a model often gets the indentation
// or the line ends wrong, never the words). One occurrence is required unless
// all is set. It returns the new content and how many were replaced.
func replaceText(content, oldText, newText string, all bool) (string, int, error) {
	if oldText == "" {
		return "", 0, errors.New("old_text is empty; give the text to replace (write_file replaces a whole file)")
	}
	if oldText == newText {
		return "", 0, errors.New("old_text and new_text are the same; nothing would change")
	}
	crlf := strings.Count(content, "\r\n") > 0 && strings.Count(content, "\r\n") == strings.Count(content, "\n")
	if crlf && !strings.Contains(oldText, "\r\n") {
		oldText = strings.ReplaceAll(oldText, "\n", "\r\n")
		newText = strings.ReplaceAll(newText, "\n", "\r\n")
	}
	if n := strings.Count(content, oldText); n > 0 {
		if n > 1 && !all {
			return "", 0, fmt.Errorf("old_text occurs %d times; add lines around it to make it unique, or set replace_all", n)
		}
		if all {
			return strings.ReplaceAll(content, oldText, newText), n, nil
		}
		return strings.Replace(content, oldText, newText, 1), 1, nil
	}
	for _, norm := range []func(string) string{
		func(s string) string { return strings.TrimRight(s, " \t\r") },
		func(s string) string { return strings.TrimSpace(s) },
	} {
		spans := fuzzySpans(content, oldText, norm)
		if len(spans) == 0 {
			continue
		}
		if len(spans) > 1 && !all {
			return "", 0, fmt.Errorf("old_text was not found exactly, and occurs %d times when whitespace is ignored; add lines around it to make it unique, or set replace_all", len(spans))
		}
		var b strings.Builder
		last := 0
		for _, sp := range spans {
			b.WriteString(content[last:sp.start])
			b.WriteString(reindent(content[sp.start:sp.end], oldText, newText))
			last = sp.end
		}
		b.WriteString(content[last:])
		return b.String(), len(spans), nil
	}
	return "", 0, errors.New("old_text was not found, not even ignoring whitespace; read the file again and copy the text exactly")
}

type span struct{ start, end int }

// fuzzySpans finds the runs of whole lines of content that equal the lines
// of old under norm. A span ends before the last line's newline unless old
// ends with one.
func fuzzySpans(content, old string, norm func(string) string) []span {
	oldLines := strings.Split(strings.TrimSuffix(old, "\n"), "\n")
	// Leading and trailing blank lines of old carry nothing to match on.
	for len(oldLines) > 0 && strings.TrimSpace(oldLines[0]) == "" {
		oldLines = oldLines[1:]
	}
	for len(oldLines) > 0 && strings.TrimSpace(oldLines[len(oldLines)-1]) == "" {
		oldLines = oldLines[:len(oldLines)-1]
	}
	if len(oldLines) == 0 {
		return nil
	}
	want := make([]string, len(oldLines))
	for i, l := range oldLines {
		want[i] = norm(l)
	}
	// Start offsets of every line of content.
	var starts []int
	for i := 0; i <= len(content); {
		starts = append(starts, i)
		j := strings.IndexByte(content[i:], '\n')
		if j < 0 {
			break
		}
		i += j + 1
		if i == len(content) {
			break
		}
	}
	lineAt := func(k int) string {
		s := starts[k]
		e := len(content)
		if k+1 < len(starts) {
			e = starts[k+1] - 1
		} else if strings.HasSuffix(content, "\n") {
			e = len(content) - 1
		}
		return content[s:e]
	}
	var spans []span
	for k := 0; k+len(want) <= len(starts); k++ {
		match := true
		for i := range want {
			if norm(lineAt(k+i)) != want[i] {
				match = false
				break
			}
		}
		if !match {
			continue
		}
		lastK := k + len(want) - 1
		end := starts[lastK] + len(lineAt(lastK))
		spans = append(spans, span{starts[k], end})
		k = lastK
	}
	return spans
}

// reindent moves new's lines by the indentation the matched text has over
// old's, so a match found ignoring indentation keeps the file's indentation.
func reindent(matched, old, new string) string {
	mi, oi := indentOf(matched), indentOf(old)
	if mi == oi {
		return strings.TrimSuffix(new, "\n")
	}
	lines := strings.Split(strings.TrimSuffix(new, "\n"), "\n")
	for i, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		if strings.HasPrefix(l, oi) {
			lines[i] = mi + strings.TrimPrefix(l, oi)
		}
	}
	return strings.Join(lines, "\n")
}

func indentOf(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.TrimSpace(l) != "" {
			return l[:len(l)-len(strings.TrimLeft(l, " \t"))]
		}
	}
	return ""
}

// diffSummary is a unified diff of two versions of a file, with two lines
// of context, headed by how many lines were added and removed; a long diff is
// cut at diffMaxLines lines, saying so.
func diffSummary(p, before, after string) string {
	a := splitLines(before)
	b := splitLines(after)
	if before == "" {
		a = nil
	}
	if after == "" {
		b = nil
	}
	ops := lineDiff(a, b)
	added, removed := 0, 0
	for _, o := range ops {
		switch o.kind {
		case '+':
			added++
		case '-':
			removed++
		}
	}
	var out strings.Builder
	fmt.Fprintf(&out, "%s: +%d -%d lines\n", p, added, removed)
	if added+removed == 0 {
		return out.String()
	}
	const ctx = 2
	lines := 0
	cut := false
	for i := 0; i < len(ops); {
		if ops[i].kind == ' ' {
			i++
			continue
		}
		// A hunk: from ctx lines before the change to ctx lines after the
		// last change that is close enough.
		start := i - ctx
		if start < 0 {
			start = 0
		}
		end := i
		for j := i; j < len(ops); j++ {
			if ops[j].kind != ' ' {
				end = j
			} else if j-end > 2*ctx {
				break
			}
		}
		stop := end + ctx + 1
		if stop > len(ops) {
			stop = len(ops)
		}
		fmt.Fprintf(&out, "@@ -%d +%d @@\n", ops[start].a+1, ops[start].b+1)
		for _, o := range ops[start:stop] {
			if lines >= diffMaxLines {
				cut = true
				break
			}
			fmt.Fprintf(&out, "%c%s\n", o.kind, strings.TrimRight(o.text, "\r"))
			lines++
		}
		if cut {
			break
		}
		i = stop
	}
	if cut {
		fmt.Fprintf(&out, "[diff cut at %d lines; read the file to see the rest]\n", diffMaxLines)
	}
	return out.String()
}

type diffOp struct {
	kind rune // ' ', '-', '+'
	text string
	a, b int // line index in before and after at this op
}

// lineDiff is a longest-common-subsequence diff of the lines between the
// common head and tail; past a size where the table would be large it shows
// the middle as removed then added, which is still a correct diff.
func lineDiff(a, b []string) []diffOp {
	var ops []diffOp
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		ops = append(ops, diffOp{' ', a[pre], pre, pre})
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	am, bm := a[pre:len(a)-suf], b[pre:len(b)-suf]
	if len(am)*len(bm) > 4_000_000 {
		for i, l := range am {
			ops = append(ops, diffOp{'-', l, pre + i, pre})
		}
		for i, l := range bm {
			ops = append(ops, diffOp{'+', l, pre + len(am), pre + i})
		}
	} else {
		// lcs[i][j] is the LCS length of am[i:] and bm[j:].
		lcs := make([][]int32, len(am)+1)
		for i := range lcs {
			lcs[i] = make([]int32, len(bm)+1)
		}
		for i := len(am) - 1; i >= 0; i-- {
			for j := len(bm) - 1; j >= 0; j-- {
				if am[i] == bm[j] {
					lcs[i][j] = lcs[i+1][j+1] + 1
				} else if lcs[i+1][j] >= lcs[i][j+1] {
					lcs[i][j] = lcs[i+1][j]
				} else {
					lcs[i][j] = lcs[i][j+1]
				}
			}
		}
		i, j := 0, 0
		for i < len(am) || j < len(bm) {
			switch {
			case i < len(am) && j < len(bm) && am[i] == bm[j]:
				ops = append(ops, diffOp{' ', am[i], pre + i, pre + j})
				i++
				j++
			case j < len(bm) && (i == len(am) || lcs[i][j+1] > lcs[i+1][j]):
				ops = append(ops, diffOp{'+', bm[j], pre + i, pre + j})
				j++
			default:
				ops = append(ops, diffOp{'-', am[i], pre + i, pre + j})
				i++
			}
		}
	}
	for k := 0; k < suf; k++ {
		ia, ib := len(a)-suf+k, len(b)-suf+k
		ops = append(ops, diffOp{' ', a[ia], ia, ib})
	}
	return ops
}
