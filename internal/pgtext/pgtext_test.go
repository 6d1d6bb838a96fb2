package pgtext

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

const note = `"_escaped":"text held NUL (shown as ␀) or bytes that are not UTF-8 (shown as \\xNN)"`

func TestJSON(t *testing.T) {
	tests := map[string]struct {
		reason      string
		in, want    string
		wantEscaped bool
	}{
		"clean": {
			reason: "clean text is stored as it came, byte for byte",
			in:     `{"out":"ok \u00e9 \ud83d\ude00", "n": 1}`, want: `{"out":"ok \u00e9 \ud83d\ude00", "n": 1}`,
		},
		"escaped NUL": {
			reason: "jsonb refuses the escape of NUL: it becomes the NUL symbol",
			in:     `{"out":"a\u0000b"}`, want: `{"out":"a␀b",` + note + `}`, wantEscaped: true,
		},
		"raw NUL": {
			reason: "a raw NUL inside a string is shown the same way",
			in:     "{\"out\":\"a\x00b\"}", want: `{"out":"a␀b",` + note + `}`, wantEscaped: true,
		},
		"an escaped backslash before u0000 is text": {
			reason: `\\u0000 is a backslash and the text u0000, not an escape of NUL`,
			in:     `{"out":"\\u0000"}`, want: `{"out":"\\u0000"}`,
		},
		"invalid UTF-8": {
			reason: "each byte that is not UTF-8 becomes the text \\xNN",
			in:     "{\"out\":\"bin \xff\xfe end\"}", want: `{"out":"bin \\xFF\\xFE end",` + note + `}`, wantEscaped: true,
		},
		"lone surrogate": {
			reason: "an unpaired surrogate escape is kept as its text",
			in:     `{"s":"x\ud800y"}`, want: `{"s":"x\\ud800y",` + note + `}`, wantEscaped: true,
		},
		"lone low surrogate": {
			in: `["\uDC01"]`, want: `["\\uDC01"]`, wantEscaped: true,
		},
		"member names too": {
			in: `{"a\u0000":1}`, want: `{"a␀":1,` + note + `}`, wantEscaped: true,
		},
		"empty object": {
			reason: "the marker of an object with no other member needs no comma",
			in:     "\x00", want: `␀`, wantEscaped: true,
		},
		"marker wins over the object's own": {
			reason: "jsonb keeps the last of duplicate names: ours is last",
			in:     `{"_escaped":"mine","x":"\u0000" }`, want: `{"_escaped":"mine","x":"␀" ,` + note + `}`, wantEscaped: true,
		},
		"not an object": {
			in: `"\u0000"`, want: `"␀"`, wantEscaped: true,
		},
		"raw control characters": {
			reason: "JSON does not allow them raw; their escapes are lossless",
			in:     "{\"t\":\"a\x01b\"}", want: `{"t":"a\u0001b"}`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, escaped := JSON([]byte(tc.in))
			if diff := cmp.Diff(tc.want, string(got)); diff != "" || escaped != tc.wantEscaped {
				t.Errorf("%s\nJSON(%q): escaped %v, want %v; -want +got:\n%s", tc.reason, tc.in, escaped, tc.wantEscaped, diff)
			}
		})
	}
}

func TestString(t *testing.T) {
	for in, want := range map[string]string{
		"plain":            "plain",
		"a\x00b":           "a␀b",
		"caf\xe9":          `caf\xE9`,
		"ok é":             "ok é",
		"\x00\xff\xc3\xa9": `␀\xFFé`,
	} {
		if got := String(in); got != want {
			t.Errorf("String(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzJSON: whatever JSON a guest or a person sends, the result is JSON
// jsonb's text rules take, the same result once more, and, for clean
// input, the input itself.
func FuzzJSON(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":"\u0000"}`, "{\"a\":\"\xff\"}", `["\ud800\udc00","\udbff"]`, `"\\\u0000"`, `{"a":[1,{"b":"\u0000\u0000"}]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out, escaped := JSON(in)
		if !Clean(out) {
			t.Fatalf("JSON(%q) = %q, which is not clean", in, out)
		}
		if again, more := JSON(out); string(again) != string(out) || more {
			t.Fatalf("JSON is not stable: %q, then %q", out, again)
		}
		if !escaped && string(out) != string(in) && !strings.ContainsAny(string(in), "\x01\x02\x03\x04\x05\x06\x07\x08\t\n\v\f\r\x0e\x0f\x10\x11\x12\x13\x14\x15\x16\x17\x18\x19\x1a\x1b\x1c\x1d\x1e\x1f") {
			t.Fatalf("JSON(%q) changed it to %q without saying so", in, out)
		}
		if !json.Valid(in) {
			return
		}
		if !json.Valid(out) {
			t.Fatalf("JSON(%q) = %q, which is not JSON", in, out)
		}
		if !escaped {
			var a, b any
			_ = json.Unmarshal(in, &a)
			_ = json.Unmarshal(out, &b)
			if diff := cmp.Diff(a, b); diff != "" {
				t.Fatalf("JSON(%q) changed the value of clean JSON: %s", in, diff)
			}
		}
	})
}

func FuzzString(f *testing.F) {
	for _, s := range []string{"", "a\x00", "\xff", "é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		out := String(in)
		if !utf8.ValidString(out) || strings.Contains(out, "\x00") {
			t.Fatalf("String(%q) = %q", in, out)
		}
		if String(out) != out {
			t.Fatalf("String is not stable on %q", in)
		}
		if utf8.ValidString(in) && !strings.Contains(in, "\x00") && out != in {
			t.Fatalf("String changed clean %q", in)
		}
	})
}
