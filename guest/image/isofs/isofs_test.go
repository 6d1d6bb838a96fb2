package isofs

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestWriteRead(t *testing.T) {
	tests := map[string]struct {
		reason string
		label  string
		files  map[string][]byte
		mode   os.FileMode
	}{
		"seed": {
			reason: "flat files, private: a seed carries a token",
			label:  "cidata",
			files:  map[string][]byte{"meta-data": []byte("instance-id: iid-a\n"), "user-data": []byte("#cloud-config\n"), "guest.json": []byte(`{"token":"t"}`)},
			mode:   0o600,
		},
		"runtime": {
			reason: "files in a sub-directory, read-only",
			label:  "DOTS_RUNTIME",
			files:  map[string][]byte{"manifest.json": []byte("{}\n"), "bin/dot-agentd": []byte("binary"), "units/dot-agentd.service": []byte("[Unit]\n")},
			mode:   0o444,
		},
		"empty file": {
			reason: "an empty file is kept",
			label:  "X",
			files:  map[string][]byte{"empty": {}},
			mode:   0o644,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			dest := filepath.Join(t.TempDir(), "out.iso")
			if err := Write(dest, tc.label, tc.files, tc.mode); err != nil {
				t.Fatalf("%s: Write() = %v", tc.reason, err)
			}
			fi, err := os.Stat(dest)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != tc.mode {
				t.Errorf("%s: mode = %v, want %v", tc.reason, fi.Mode().Perm(), tc.mode)
			}
			label, files, err := Read(dest)
			if err != nil {
				t.Fatalf("%s: Read() = %v", tc.reason, err)
			}
			if label != tc.label {
				t.Errorf("%s: label = %q, want %q", tc.reason, label, tc.label)
			}
			if diff := cmp.Diff(tc.files, files, cmp.Comparer(func(a, b []byte) bool { return string(a) == string(b) })); diff != "" {
				t.Errorf("%s: files (-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}

func TestWriteReplaces(t *testing.T) {
	dest := filepath.Join(t.TempDir(), "seed.iso")
	if err := Write(dest, "cidata", map[string][]byte{"meta-data": []byte("old")}, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Write(dest, "cidata", map[string][]byte{"meta-data": []byte("new")}, 0o600); err != nil {
		t.Fatal(err)
	}
	_, files, err := Read(dest)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(files["meta-data"]); got != "new" {
		t.Errorf("meta-data after a second Write = %q, want %q", got, "new")
	}
	entries, _ := os.ReadDir(filepath.Dir(dest))
	if len(entries) != 1 {
		t.Errorf("the folder holds %d entries after two writes, want only the ISO (no temporary file left)", len(entries))
	}
}
