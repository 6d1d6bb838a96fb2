package tools

import (
	"strings"
	"unicode/utf8"
)

// screenText turns what a program writes on a terminal into the text the
// model reads (ref 8.8 terminal_text): escape sequences are dropped, "\r\n"
// ends a line, a lone "\r", a backspace and erase-in-line overwrite the
// current line, and an escape sequence (or a character) cut by the end of one
// poll is held back until the next. A program that paints the whole screen
// (vim, htop) is not rendered: cursor addressing is dropped like the rest.
//
// No terminal emulator library is used on purpose: an emulator renders a
// fixed 80x24 grid, which loses every line that scrolled off between two
// polls, while the model needs all of a command's output since its last look.
type screenText struct {
	pending []byte // an escape sequence or a UTF-8 character cut by a poll
	line    []rune // the current line
	col     int    // the cursor in it
	dirty   bool   // the current line changed since it was last shown
}

// tabWidth is a terminal's tab stop.
const tabWidth = 8

// feed renders b and returns the text of this poll: the lines ended since the
// last poll, then the current line when it changed.
func (s *screenText) feed(b []byte) string {
	data := append(s.pending, b...)
	s.pending = nil
	var out strings.Builder
	for i := 0; i < len(data); {
		c := data[i]
		switch {
		case c == 0x1b:
			n, complete := escapeLen(data[i:])
			if !complete {
				s.pending = append([]byte(nil), data[i:]...)
				return s.flush(&out)
			}
			s.escape(data[i : i+n])
			i += n
		case c == '\n':
			out.WriteString(strings.TrimRight(string(s.line), " "))
			out.WriteByte('\n')
			s.line, s.col, s.dirty = s.line[:0], 0, false
			i++
		case c == '\r':
			s.col = 0
			i++
		case c == '\b':
			if s.col > 0 {
				s.col--
			}
			i++
		case c == '\t':
			next := (s.col/tabWidth + 1) * tabWidth
			for s.col < next {
				s.put(' ')
			}
			i++
		case c < 0x20 || c == 0x7f:
			// BEL and the other controls show nothing.
			i++
		default:
			r, size := utf8.DecodeRune(data[i:])
			if r == utf8.RuneError && size <= 1 {
				if !utf8.FullRune(data[i:]) {
					s.pending = append([]byte(nil), data[i:]...)
					return s.flush(&out)
				}
				r = '\uFFFD'
				size = 1
			}
			s.put(r)
			i += size
		}
	}
	return s.flush(&out)
}

func (s *screenText) flush(out *strings.Builder) string {
	if s.dirty {
		// The current line as it is: a prompt's trailing space is part of
		// what the screen shows.
		out.WriteString(string(s.line))
		s.dirty = false
	}
	return out.String()
}

func (s *screenText) put(r rune) {
	for len(s.line) < s.col {
		s.line = append(s.line, ' ')
	}
	if s.col < len(s.line) {
		s.line[s.col] = r
	} else {
		s.line = append(s.line, r)
	}
	s.col++
	s.dirty = true
}

// escape applies the one sequence that changes the text: CSI K, erase in
// line. Every other sequence (colours, cursor moves, titles) is dropped.
func (s *screenText) escape(seq []byte) {
	if len(seq) < 3 || seq[1] != '[' || seq[len(seq)-1] != 'K' {
		return
	}
	switch string(seq[2 : len(seq)-1]) {
	case "", "0": // cursor to end
		if s.col < len(s.line) {
			s.line = s.line[:s.col]
		}
	case "1": // start to cursor
		for i := 0; i <= s.col && i < len(s.line); i++ {
			s.line[i] = ' '
		}
	case "2": // whole line
		s.line = s.line[:0]
	default:
		return
	}
	s.dirty = true
}

// escapeLen returns the length of the escape sequence at the start of b and
// whether it is complete in b.
func escapeLen(b []byte) (int, bool) {
	if len(b) < 2 {
		return 0, false
	}
	switch b[1] {
	case '[': // CSI: parameters, intermediates, one final byte
		for i := 2; i < len(b); i++ {
			if b[i] >= 0x40 && b[i] <= 0x7e {
				return i + 1, true
			}
			if b[i] < 0x20 || b[i] > 0x3f && b[i] < 0x40 {
				// A malformed sequence: drop what was read of it.
				return i, true
			}
		}
		return 0, false
	case ']', 'P', '_', '^', 'X': // strings ended by BEL or ST (ESC \)
		for i := 2; i < len(b); i++ {
			if b[i] == 0x07 {
				return i + 1, true
			}
			if b[i] == 0x1b {
				if i+1 >= len(b) {
					return 0, false
				}
				if b[i+1] == '\\' {
					return i + 2, true
				}
			}
		}
		return 0, false
	default: // ESC, intermediates, one final byte (ESC ( B, ESC =, ESC 7)
		for i := 1; i < len(b); i++ {
			if b[i] >= 0x30 && b[i] <= 0x7e {
				return i + 1, true
			}
			if b[i] < 0x20 || b[i] > 0x7e {
				return i, true
			}
		}
		return 0, false
	}
}
