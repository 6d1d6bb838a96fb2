package work

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/invisible-dots/invisible-dots/guest/engine/openrouter"
)

func TestCanonicalJSONSortsKeys(t *testing.T) {
	a, _ := canonicalJSON(map[string]any{"b": 1, "a": map[string]any{"z": true, "y": "x"}})
	b, _ := canonicalJSON(map[string]any{"a": map[string]any{"y": "x", "z": true}, "b": 1})
	if a != b || a != `{"a":{"y":"x","z":true},"b":1}` {
		t.Errorf("canonical forms %s and %s, want equal, sorted, no spaces", a, b)
	}
}

func TestCutText(t *testing.T) {
	tests := map[string]struct {
		in   string
		max  int
		want string
	}{
		"short":     {"hello", 10, "hello"},
		"exact":     {"hello", 5, "hello"},
		"cut":       {"hello world", 5, "hell…"},
		"multibyte": {"ééééé", 3, "éé…"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := cutText(tc.in, tc.max)
			if got != tc.want || utf8.RuneCountInString(got) > tc.max {
				t.Errorf("cutText(%q, %d) = %q, want %q", tc.in, tc.max, got, tc.want)
			}
		})
	}
}

func TestFitLatestRoundCutsOnlyTheLatestResults(t *testing.T) {
	msgs := []openrouter.Message{
		{Role: "system", Content: "s"},
		{Role: "tool", Content: strings.Repeat("a", 4000)}, // an older round: kept
		{Role: "assistant", Content: "calls"},
		{Role: "tool", Content: strings.Repeat("b", 40000)},
	}
	fitLatestRound(msgs, nil, 3000)
	if len(msgs[1].Content) != 4000 {
		t.Errorf("an older result was cut")
	}
	last := msgs[3].Content
	if !strings.Contains(last, "Cut to fit the context window") || estimateTokens(msgs, nil) > 3000+100 {
		t.Errorf("latest result not cut to the window: %d tokens, tail %q", estimateTokens(msgs, nil), last[len(last)-120:])
	}
}

func TestPersonTailKeepsTheLatestMessagesNewestFirst(t *testing.T) {
	th := thread{msgs: []Message{
		{Role: "user", Content: "first", InboundID: "1"},
		{Role: "assistant", Content: "ok"},
		{Role: "user", Content: "[Approval] engine note"},
		{Role: "user", Content: "second", InboundID: "2"},
	}}
	got := personTail(th)
	i2, i1 := strings.Index(got, ") second"), strings.Index(got, ") first")
	if i2 < 0 || i1 < 0 || i2 > i1 || strings.Contains(got, "engine note") {
		t.Errorf("personTail = %q, want the person's messages newest first, and no engine note", got)
	}
	if diff := cmp.Diff("", personTail(thread{})); diff != "" {
		t.Errorf("empty thread: %s", diff)
	}
}
