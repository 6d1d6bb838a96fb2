// Package pgtext is the one rule for text PostgreSQL cannot hold.
//
// PostgreSQL's text and jsonb refuse the NUL character (a jsonb "\u0000"
// escape as much as a raw byte) and bytes that are not UTF-8, and jsonb
// refuses an escaped surrogate that is not half of a pair. A tool's binary
// output, a page's text or a person's paste holds them often enough, and an
// event refused for them would stop a Dot's log (the pump sends its batch
// again until it is taken). So whatever the control plane stores from a guest
// or a person passes through here first: such text is kept visible and
// readable, never an error. NUL becomes U+2400 (␀), each byte that is not
// UTF-8 becomes the four characters \xNN, and a lone surrogate escape becomes
// the six characters \uDXXX; a JSON object that needed any of it says so in
// its "_escaped" member (EscapedKey).
package pgtext

import (
	"bytes"
	"strings"
	"unicode/utf8"
)

// EscapedKey is the member a JSON object gains when its text was escaped,
// holding EscapedNote.
const EscapedKey = "_escaped"

// EscapedNote says what was done, for whoever reads the stored object.
const EscapedNote = `text held NUL (shown as ␀) or bytes that are not UTF-8 (shown as \xNN)`

// nulSymbol stands for a NUL character.
const nulSymbol = "\u2400"

const hexDigits = "0123456789ABCDEF"

// String returns s as PostgreSQL's text can hold it: s itself when it holds
// no NUL and is UTF-8.
func String(s string) string {
	if utf8.ValidString(s) && !strings.Contains(s, "\x00") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		c := s[i]
		if c == 0 {
			b.WriteString(nulSymbol)
			i++
			continue
		}
		if c < utf8.RuneSelf {
			b.WriteByte(c)
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			writeByteEscape(&b, c)
			i++
			continue
		}
		b.WriteString(s[i : i+size])
		i += size
	}
	return b.String()
}

type byteWriter interface {
	WriteByte(byte) error
	WriteString(string) (int, error)
}

// writeByteEscape writes \xNN for c, as text.
func writeByteEscape(w byteWriter, c byte) {
	w.WriteString(`\x`)
	w.WriteByte(hexDigits[c>>4])
	w.WriteByte(hexDigits[c&0xF])
}

// Clean reports whether raw is JSON text jsonb takes as it is (as far as
// text goes): UTF-8, with no NUL, no raw control character but JSON's white
// space, and no escape of NUL or of a lone surrogate. Most events are clean
// and are stored untouched; the check costs one pass over the bytes unless
// an escape needs a closer look.
func Clean(raw []byte) bool {
	if !utf8.Valid(raw) {
		return false
	}
	for _, c := range raw {
		if c < 0x20 && c != '\t' && c != '\n' && c != '\r' {
			return false
		}
	}
	if !suspectEscape(raw) {
		return true
	}
	out, escaped := rewrite(raw)
	return !escaped && bytes.Equal(out, raw)
}

// suspectEscape reports whether raw has the text of an escape of NUL or of a
// surrogate anywhere, inside a string or not, escaped or not.
func suspectEscape(raw []byte) bool {
	for i := bytes.Index(raw, []byte(`\u`)); i >= 0; {
		if i+6 <= len(raw) {
			if h := raw[i+2 : i+6]; string(h) == "0000" || ((h[0] == 'd' || h[0] == 'D') && isSurrogateHex(h[1])) {
				return true
			}
		}
		next := bytes.Index(raw[i+2:], []byte(`\u`))
		if next < 0 {
			break
		}
		i += 2 + next
	}
	return false
}

func isSurrogateHex(c byte) bool {
	switch c {
	case '8', '9', 'a', 'b', 'c', 'd', 'e', 'f', 'A', 'B', 'C', 'D', 'E', 'F':
		return true
	}
	return false
}

// JSON returns raw as jsonb can hold its text, and whether anything had to
// be escaped; raw itself when it is Clean. Inside strings (and member names)
// NUL, escapes of NUL, bytes that are not UTF-8 and lone surrogate escapes
// are escaped as the package says, and raw control characters (which JSON
// does not allow) are written as their \u00XX escapes. When something was
// escaped and raw is an object, the object gains EscapedKey. JSON makes no
// other change: what is not valid JSON for other reasons stays so.
func JSON(raw []byte) ([]byte, bool) {
	if Clean(raw) {
		return raw, false
	}
	b, escaped := rewrite(raw)
	if escaped {
		b = markObject(b)
	}
	return b, escaped
}

// rewrite is JSON without the fast path and the marker.
func rewrite(raw []byte) ([]byte, bool) {
	var (
		out     bytes.Buffer
		inStr   bool
		escaped bool
	)
	out.Grow(len(raw) + len(EscapedNote) + 24)
	for i := 0; i < len(raw); {
		c := raw[i]
		switch {
		case !inStr:
			if c == '"' {
				inStr = true
			}
			if c >= utf8.RuneSelf {
				// Outside a string this is not JSON, but the
				// text at least must be storable.
				if r, size := utf8.DecodeRune(raw[i:]); r != utf8.RuneError || size > 1 {
					out.Write(raw[i : i+size])
					i += size
					continue
				}
				writeByteEscape(&out, c)
				escaped = true
				i++
				continue
			}
			if c < 0x20 && c != '\t' && c != '\n' && c != '\r' {
				if c == 0 {
					out.WriteString(nulSymbol)
				} else {
					writeByteEscape(&out, c)
				}
				escaped = true
				i++
				continue
			}
			out.WriteByte(c)
			i++
		case c == '"':
			inStr = false
			out.WriteByte(c)
			i++
		case c == '\\':
			n, esc := jsonEscape(&out, raw[i:])
			escaped = escaped || esc
			i += n
		case c == 0:
			out.WriteString(nulSymbol)
			escaped = true
			i++
		case c < 0x20:
			out.WriteString(`\u00`)
			out.WriteByte(hexDigits[c>>4])
			out.WriteByte(hexDigits[c&0xF])
			i++
		case c < utf8.RuneSelf:
			out.WriteByte(c)
			i++
		default:
			r, size := utf8.DecodeRune(raw[i:])
			if r == utf8.RuneError && size == 1 {
				// As text inside a JSON string: the backslash is
				// itself escaped.
				out.WriteString(`\\x`)
				out.WriteByte(hexDigits[c>>4])
				out.WriteByte(hexDigits[c&0xF])
				escaped = true
				i++
				continue
			}
			out.Write(raw[i : i+size])
			i += size
		}
	}
	return out.Bytes(), escaped
}

// jsonEscape writes the escape at the start of s (s[0] is a backslash inside
// a string) as jsonb can hold it and returns how many bytes of s it took and
// whether it had to change it.
func jsonEscape(out *bytes.Buffer, s []byte) (int, bool) {
	if len(s) < 2 {
		// A string that ends in a lone backslash: keep it as text.
		out.WriteString(`\\`)
		return 1, true
	}
	if s[1] != 'u' {
		if s[1] < 0x20 || s[1] >= utf8.RuneSelf {
			// Not an escape JSON knows: the backslash as text, the
			// byte after it handled on its own.
			out.WriteString(`\\`)
			return 1, true
		}
		out.Write(s[:2])
		return 2, false
	}
	r, ok := hex4(s[2:])
	if !ok {
		out.WriteString(`\\`)
		return 1, true
	}
	switch {
	case r == 0:
		out.WriteString(nulSymbol)
		return 6, true
	case r >= 0xD800 && r <= 0xDBFF:
		if len(s) >= 12 && s[6] == '\\' && s[7] == 'u' {
			if lo, ok := hex4(s[8:]); ok && lo >= 0xDC00 && lo <= 0xDFFF {
				out.Write(s[:12])
				return 12, false
			}
		}
		fallthrough
	case r >= 0xDC00 && r <= 0xDFFF:
		// A lone surrogate: its escape as text.
		out.WriteString(`\\`)
		out.Write(s[1:6])
		return 6, true
	}
	out.Write(s[:6])
	return 6, false
}

// hex4 reads four hex digits.
func hex4(s []byte) (rune, bool) {
	if len(s) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range s[:4] {
		var v byte
		switch {
		case c >= '0' && c <= '9':
			v = c - '0'
		case c >= 'a' && c <= 'f':
			v = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			v = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(v)
	}
	return r, true
}

// markObject adds EscapedKey as the last member of the object b is, so that
// it wins over a member of that name the object held (jsonb keeps the last
// of duplicate names). b is returned as it is when it is not an object.
func markObject(b []byte) []byte {
	start := bytes.IndexFunc(b, notSpace)
	end := bytes.LastIndexFunc(b, notSpace)
	if start < 0 || b[start] != '{' || b[end] != '}' {
		return b
	}
	inner := bytes.TrimFunc(b[start+1:end], isSpace)
	member := `"` + EscapedKey + `":"` + strings.ReplaceAll(EscapedNote, `\`, `\\`) + `"`
	out := make([]byte, 0, len(b)+len(member)+1)
	out = append(out, b[:end]...)
	if len(inner) > 0 {
		out = append(out, ',')
	}
	out = append(out, member...)
	return append(out, b[end:]...)
}

func isSpace(r rune) bool { return r == ' ' || r == '\t' || r == '\n' || r == '\r' }

func notSpace(r rune) bool { return !isSpace(r) }
