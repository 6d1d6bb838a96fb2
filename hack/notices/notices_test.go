package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNoticesAreCurrent fails when THIRD_PARTY_NOTICES.md is not what the
// module graph and the web client's lock file say now (ref 11.3: no list is
// written by hand, so it cannot drift from what is built).
func TestNoticesAreCurrent(t *testing.T) {
	root := filepath.Join("..", "..")
	want, err := Generate(root)
	if err != nil {
		t.Fatal(err)
	}
	have, err := os.ReadFile(filepath.Join(root, NoticesFile))
	if err != nil {
		t.Fatalf("%v: run 'go run ./hack/notices' at the repository root and commit the file", err)
	}
	if !bytes.Equal(have, want) {
		t.Fatalf("%s is out of date (a module or a web package changed): run 'go run ./hack/notices' at the repository root and commit it", NoticesFile)
	}
	// Everything shipped comes with its license: a component without a
	// license file is a question for a person, not a row to pass over.
	for _, line := range strings.Split(string(want), "\n") {
		if strings.Contains(line, "no license file in the package") {
			t.Errorf("no license file found for: %s", line)
		}
	}
}
