package cli

import (
	"testing"

	"github.com/go-logr/logr"
)

func TestHooksListenerIsOffByDefault(t *testing.T) {
	t.Setenv("INVISIBLE_DOTS_HOOKS_LISTEN", "")
	addr, err := parseHooksListen("")
	if addr != "" || err != nil {
		t.Fatalf("parseHooksListen(\"\") = %q, %v; want no address", addr, err)
	}
	// No manager is needed, none is touched: a nil one would panic.
	if err := addHooksListener(nil, addr, logr.Discard()); err != nil {
		t.Errorf("addHooksListener without an address: %v; want nothing done", err)
	}
	for v, ok := range map[string]bool{"127.0.0.1:8790": true, ":8790": true, " [::1]:8790 ": true, "8790": false, "127.0.0.1": false, "127.0.0.1:": false} {
		if _, err := parseHooksListen(v); (err == nil) != ok {
			t.Errorf("parseHooksListen(%q) = %v; want ok=%v", v, err, ok)
		}
	}
}

func TestHooksBaseURL(t *testing.T) {
	cases := []struct{ url, listen, want string }{
		{"https://hooks.example.com/", "127.0.0.1:8790", "https://hooks.example.com/"},
		{"", "0.0.0.0:8790", "http://127.0.0.1:8790"},
		{"", ":8790", "http://127.0.0.1:8790"},
		{"", "192.0.2.1:8790", "http://192.0.2.1:8790"},
	}
	for _, c := range cases {
		t.Setenv("INVISIBLE_DOTS_HOOKS_URL", c.url)
		t.Setenv("INVISIBLE_DOTS_HOOKS_LISTEN", c.listen)
		if got, known := hooksBaseURL(); got != c.want || !known {
			t.Errorf("URL %q, listen %q: hooksBaseURL() = %q, %v; want %q", c.url, c.listen, got, known, c.want)
		}
	}
	t.Setenv("INVISIBLE_DOTS_HOOKS_URL", "")
	t.Setenv("INVISIBLE_DOTS_HOOKS_LISTEN", "")
	if _, known := hooksBaseURL(); known {
		t.Error("with neither set the URL is a stand-in, and says so")
	}
}
