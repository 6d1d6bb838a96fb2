package channels

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestPairingCodes(t *testing.T) {
	seen := map[string]bool{}
	for range 200 {
		code, hash := NewPairingCode()
		if len(code) != PairingCodeLength || strings.ContainsAny(code, "ILOU") {
			t.Fatalf("code %q: want %d symbols of Crockford's alphabet", code, PairingCodeLength)
		}
		if seen[code] {
			t.Fatalf("code %q made twice in 200", code)
		}
		seen[code] = true
		if HashPairingCode(code) != hash {
			t.Fatalf("code %q does not hash to what it was stored as", code)
		}
		// As a person may type it: lower case, with a dash in the middle.
		typed := strings.ToLower(code[:4]) + "-" + code[4:]
		if HashPairingCode(typed) != hash {
			t.Errorf("%q typed as %q is not the same code", code, typed)
		}
	}
	if HashPairingCode("0O1IL111") != HashPairingCode("00111111") {
		t.Errorf("O, I and L are not read as 0 and 1")
	}
	for _, bad := range []string{"", "SHORT", "TOOLONGCODE1", "ABCD EFG!", "ÄBCDEFGH"} {
		if _, err := NormalizePairingCode(bad); err == nil {
			t.Errorf("NormalizePairingCode(%q) accepted", bad)
		}
	}
}

func TestStartCode(t *testing.T) {
	for text, want := range map[string]string{
		"/start 7K3M9QXA":          "7K3M9QXA",
		"  /start 7k3m-9qxa ":      "7K3M9QXA",
		"/start@dots_bot 7K3M9QXA": "7K3M9QXA",
		"/start":                   "",
		"/start hello":             "",
		"/starting 7K3M9QXA":       "",
		"please /start 7K3M9QXA":   "",
		"7K3M9QXA":                 "",
	} {
		got, ok := StartCode(text)
		if got != want || ok != (want != "") {
			t.Errorf("StartCode(%q) = %q, %v; want %q", text, got, ok, want)
		}
	}
}

func TestBucketTenAtOnceThenTwentyAMinuteToldOnce(t *testing.T) {
	var b Bucket
	now := time.Unix(1_700_000_000, 0)
	for i := range BucketBurst {
		if ok, _ := b.Take("ada", now); !ok {
			t.Fatalf("message %d of a burst of %d refused", i+1, BucketBurst)
		}
	}
	ok, tell := b.Take("ada", now)
	if ok || !tell {
		t.Fatalf("the 11th message at once: ok %v, tell %v; want refused and told", ok, tell)
	}
	if ok, tell := b.Take("ada", now.Add(time.Second)); ok || tell {
		t.Errorf("the 12th a second later: ok %v, tell %v; want refused, not told again", ok, tell)
	}
	// Another person has a bucket of their own.
	if ok, _ := b.Take("bob", now); !ok {
		t.Errorf("another person is held to ada's bucket")
	}
	// Three seconds give one message back (twenty a minute).
	if ok, _ := b.Take("ada", now.Add(4*time.Second)); !ok {
		t.Errorf("a message 4 s after the flood refused; want one back every 3 s")
	}
	if ok, tell := b.Take("ada", now.Add(4*time.Second)); ok || !tell {
		t.Errorf("after room came back and went: ok %v, tell %v; want told again once", ok, tell)
	}
	// A quiet minute fills the bucket to its burst, no more.
	later := now.Add(time.Hour)
	n := 0
	for {
		if ok, _ := b.Take("ada", later); !ok {
			break
		}
		n++
	}
	if n != BucketBurst {
		t.Errorf("after an hour's quiet %d messages at once; want %d", n, BucketBurst)
	}
}

func TestSplit(t *testing.T) {
	if got := Split("  short answer \n", 4000); len(got) != 1 || got[0] != "short answer" {
		t.Errorf("Split of a short text = %q", got)
	}
	if got := Split(" \n ", 4000); len(got) != 0 {
		t.Errorf("Split of blank text = %q; want no part", got)
	}
	para := strings.Repeat("word ", 500) // 2500 characters
	text := para + "\n\n" + para + "\n\n" + para
	parts := Split(text, 4000)
	if len(parts) != 3 {
		t.Fatalf("three paragraphs of 2500 at 4000 split into %d parts; want one a paragraph", len(parts))
	}
	for _, p := range parts {
		if p != strings.TrimSpace(para) {
			t.Errorf("a part is not a paragraph: %d characters", len(p))
		}
	}
	// No boundary at all: cut at the bound, in characters, not bytes.
	long := strings.Repeat("é", 9000)
	parts = Split(long, 4000)
	if len(parts) != 3 || utf8.RuneCountInString(parts[0]) != 4000 || strings.Join(parts, "") != long {
		t.Errorf("a text with no boundary: %d parts; want cuts at 4000 characters that lose nothing", len(parts))
	}
	for _, p := range Split(strings.Repeat("abc def\n", 2000), 4000) {
		if utf8.RuneCountInString(p) > 4000 || p == "" {
			t.Errorf("a part of %d characters", utf8.RuneCountInString(p))
		}
	}
}

func TestButtonData(t *testing.T) {
	id := "appr_" + strings.Repeat("a", 36)
	yes, err := ButtonData(true, id)
	if err != nil || yes != "ap1:y:"+id {
		t.Fatalf("ButtonData(approve) = %q, %v", yes, err)
	}
	no, _ := ButtonData(false, id)
	for data, want := range map[string]struct {
		approve bool
		ok      bool
	}{yes: {true, true}, no: {false, true}} {
		approve, got, ok := ParseButtonData(data)
		if approve != want.approve || ok != want.ok || got != id {
			t.Errorf("ParseButtonData(%q) = %v, %q, %v", data, approve, got, ok)
		}
	}
	for _, forged := range []string{"ap0:y:" + id, "ap1:yes:" + id, "ap1:y:", "ap1:y:a:b", "y:" + id, "ap1:y:" + strings.Repeat("x", 64), "ap1:y:a b"} {
		if _, _, ok := ParseButtonData(forged); ok {
			t.Errorf("ParseButtonData(%q) accepted", forged)
		}
	}
	if _, err := ButtonData(true, strings.Repeat("x", 60)); err == nil {
		t.Errorf("an id that does not fit 64 bytes is accepted")
	}
}
