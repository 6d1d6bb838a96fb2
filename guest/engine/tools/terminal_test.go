package tools

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestScreenText(t *testing.T) {
	tests := map[string]struct {
		polls []string
		want  []string // the text of each poll
	}{
		"crlf ends lines":                            {[]string{"a\r\nb\r\n"}, []string{"a\nb\n"}},
		"lone cr overwrites":                         {[]string{"50%\r100%\n"}, []string{"100%\n"}},
		"cr overwrites only what it writes":          {[]string{"abcdef\rXY\n"}, []string{"XYcdef\n"}},
		"backspace overwrites":                       {[]string{"abc\b\bX\n"}, []string{"aXc\n"}},
		"colours are dropped":                        {[]string{"\x1b[1;31mred\x1b[0m plain\n"}, []string{"red plain\n"}},
		"erase to end of line":                       {[]string{"downloading 10%\r\x1b[Kdone\n"}, []string{"done\n"}},
		"erase whole line":                           {[]string{"junk\x1b[2K\rok\n"}, []string{"ok\n"}},
		"title and bell are dropped":                 {[]string{"\x1b]0;my title\x07x\a\n"}, []string{"x\n"}},
		"charset and keypad sequences":               {[]string{"\x1b(B\x1b=y\n"}, []string{"y\n"}},
		"tab to the next stop":                       {[]string{"a\tb\n"}, []string{"a       b\n"}},
		"echoed input then the answer":               {[]string{"name? ", "bob\r\nhi bob\r\n"}, []string{"name? ", "name? bob\nhi bob\n"}},
		"escape cut between polls":                   {[]string{"ab\x1b[3", "1mc\n"}, []string{"ab", "abc\n"}},
		"osc cut between polls":                      {[]string{"x\x1b]0;ti", "tle\x1b\\y\n"}, []string{"x", "xy\n"}},
		"utf-8 cut between polls":                    {[]string{"caf\xc3", "\xa9\n"}, []string{"caf", "café\n"}},
		"nothing new shows nothing":                  {[]string{"line\n", ""}, []string{"line\n", ""}},
		"a partial line shown again when it changes": {[]string{"progress 1", "\rprogress 2"}, []string{"progress 1", "progress 2"}},
		"cursor addressing is dropped, not rendered": {[]string{"\x1b[2J\x1b[1;1Htop\n"}, []string{"top\n"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var s screenText
			var got []string
			for _, p := range tc.polls {
				got = append(got, s.feed([]byte(p)))
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("polls %q (-want +got):\n%s", tc.polls, d)
			}
		})
	}
}
