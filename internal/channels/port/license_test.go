package port_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// gplModules are modules under the GPL (or the AGPL and LGPL) that a
// WhatsApp client pulls in: whatsmeow's Signal library is GPL-3.0. The
// main module's binary holds nothing GPL; the WhatsApp program, a nested
// module with its own go.mod, is where they may be.
var gplModules = []string{
	"go.mau.fi/whatsmeow",
	"go.mau.fi/libsignal",
	"github.com/tulir/whatsmeow",
	"github.com/rhymeswithmogul",
	"github.com/signalapp/libsignal",
	"github.com/crossle/libsignal-protocol-go",
	"github.com/radicallyopensecurity/libsignal-protocol-go",
	"github.com/RadicalApp/libsignal-protocol-go",
}

func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
}

// TestTheMainModuleHoldsNothingGPL reads the main module's go.mod, go.sum
// and module graph: a GPL module in any of them would be linked into, or
// one import away from, the binary everyone installs.
func TestTheMainModuleHoldsNothingGPL(t *testing.T) {
	root := repoRoot(t)
	for _, name := range []string{"go.mod", "go.sum"} {
		b, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range gplModules {
			if strings.Contains(strings.ToLower(string(b)), strings.ToLower(m)) {
				t.Errorf("the main module's %s names %s, which is GPL: only the WhatsApp program's nested module (internal/channels/whatsapp) may use it", name, m)
			}
		}
	}
	// Read-only: the test never rewrites go.mod or go.sum.
	cmd := exec.Command("go", "list", "-mod=readonly", "-m", "all")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -m all: %v", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		path := strings.ToLower(fields[0])
		for _, m := range gplModules {
			if m = strings.ToLower(m); path == m || strings.HasPrefix(path, m+"/") {
				t.Errorf("the main module's graph holds %s, which is GPL", line)
			}
		}
	}
}

// TestTheWhatsAppProgramIsANestedModule: its own go.mod keeps the main
// module's packages (go build ./..., go vet ./...) from descending into it.
func TestTheWhatsAppProgramIsANestedModule(t *testing.T) {
	root := repoRoot(t)
	if _, err := os.Stat(filepath.Join(root, "internal", "channels", "whatsapp", "go.mod")); err != nil {
		t.Fatalf("internal/channels/whatsapp has no go.mod of its own: %v", err)
	}
	cmd := exec.Command("go", "list", "./internal/channels/...")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	if strings.Contains(string(out), "/internal/channels/whatsapp") {
		t.Errorf("the main module's packages include the WhatsApp program's:\n%s", out)
	}
}
