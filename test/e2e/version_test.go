package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// e2eVersion is the version the e2e build stamps into the binary.
const e2eVersion = "v0.0.0-e2e"

// version and --version print this product's version, and --help no longer
// carries the embedded API server's own --version flag.
func TestVersion(t *testing.T) {
	if os.Getenv("INVISIBLE_DOTS_E2E_BINARY") != "" {
		t.Skip("a prebuilt binary carries its own version")
	}
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(binary, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("invisible-dots %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	for _, args := range [][]string{{"version"}, {"--version"}} {
		if got, want := run(args...), "invisible-dots "+e2eVersion+"\n"; got != want {
			t.Errorf("invisible-dots %s = %q; want %q", strings.Join(args, " "), got, want)
		}
	}
	var b struct {
		Version, KubernetesVersion, GoVersion, Platform string
	}
	if err := json.Unmarshal([]byte(run("version", "--output", "json")), &b); err != nil {
		t.Fatal(err)
	}
	if b.Version != e2eVersion || b.KubernetesVersion != "v1.37.2" || !strings.HasPrefix(b.GoVersion, "go") || b.Platform == "" {
		t.Errorf("version --output json = %+v", b)
	}
	if help := run("--help"); strings.Contains(help, "sets the reported version") {
		t.Errorf("--help still carries the API server's --version flag:\n%s", help)
	}
	if out, err := exec.Command(binary, "version", "-o", "yaml").CombinedOutput(); err == nil || !strings.Contains(string(out), "the only output is json") {
		t.Errorf("version -o yaml: %v %s; want a refusal naming json", err, out)
	}
}
