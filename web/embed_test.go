package web

import (
	"io/fs"
	"strings"
	"testing"
)

// Built or not, the app has an index.html: the client, or the page that says
// how to build it.
func TestAppHasAnIndex(t *testing.T) {
	files, built := App()
	data, err := fs.ReadFile(files, "index.html")
	if err != nil {
		t.Fatalf("App() (built %v) has no index.html: %v", built, err)
	}
	if want := "make build"; !built && !strings.Contains(string(data), want) {
		t.Errorf("the placeholder does not say %q:\n%s", want, data)
	}
}

func TestPlaceholderServesOnlyItsPage(t *testing.T) {
	if _, err := fs.ReadFile(placeholder{}, "index.html"); err != nil {
		t.Fatalf("the placeholder's index.html: %v", err)
	}
	if _, err := (placeholder{}).Open("assets/app.js"); err == nil {
		t.Errorf("the placeholder opened assets/app.js; want not found")
	}
}
