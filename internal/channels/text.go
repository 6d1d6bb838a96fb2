package channels

import (
	"strings"
	"unicode/utf8"
)

// MaxInboundRunes bounds a person's message from a chat (ref 9.8).
const MaxInboundRunes = 8000

// Split cuts text into parts of at most max characters for an adapter
// whose messages are bounded (Telegram's 4000): at a paragraph if one ends
// in the second half of the part, else a line, else a word, else wherever
// the bound falls. Parts are trimmed; none is empty.
func Split(text string, max int) []string {
	text = strings.TrimSpace(text)
	var parts []string
	for utf8.RuneCountInString(text) > max {
		head := string([]rune(text)[:max])
		cut := -1
		for _, sep := range []string{"\n\n", "\n", " "} {
			if i := strings.LastIndex(head, sep); i >= len(head)/2 {
				cut = i
				break
			}
		}
		if cut <= 0 {
			cut = len(head)
		}
		if part := strings.TrimSpace(text[:cut]); part != "" {
			parts = append(parts, part)
		}
		text = strings.TrimSpace(text[cut:])
	}
	if text != "" {
		parts = append(parts, text)
	}
	return parts
}
