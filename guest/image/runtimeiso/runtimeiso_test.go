package runtimeiso

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/kdomanski/iso9660"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/hostagent/images"
	"github.com/invisible-dots/invisible-dots/internal/home"
)

// readISO returns the label and every file of an ISO by path.
func readISO(t *testing.T, path string) (string, map[string][]byte) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := iso9660.OpenImage(f)
	if err != nil {
		t.Fatal(err)
	}
	label, _ := img.Label()
	root, _ := img.RootDir()
	files := map[string][]byte{}
	var walk func(dir *iso9660.File, prefix string)
	walk = func(dir *iso9660.File, prefix string) {
		kids, err := dir.GetChildren()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range kids {
			if k.IsDir() {
				walk(k, prefix+k.Name()+"/")
				continue
			}
			b, _ := io.ReadAll(k.Reader())
			files[prefix+k.Name()] = b
		}
	}
	walk(root, "")
	return label, files
}

func fakeBinaries(t *testing.T) (string, string) {
	dir := t.TempDir()
	a, e := filepath.Join(dir, "agentd"), filepath.Join(dir, "engine")
	os.WriteFile(a, []byte("agentd binary"), 0o755)
	os.WriteFile(e, []byte("engine binary"), 0o755)
	return a, e
}

func TestRegisterWritesAReadableISO(t *testing.T) {
	agentd, engine := fakeBinaries(t)
	h, _ := home.New(t.TempDir())
	m, err := Register(h, agentd, engine, time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	img, err := images.Latest(h, home.Runtime)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := img.Verify(); err != nil {
		t.Fatalf("the registered ISO does not verify against its manifest: %v", err)
	}
	label, files := readISO(t, img.File)
	if label != protocol.RuntimeVolumeLabel {
		t.Fatalf("label %q, want %q", label, protocol.RuntimeVolumeLabel)
	}
	var names []string
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	want := []string{protocol.RuntimeAgentdFile, protocol.RuntimeEngineFile, protocol.RuntimeManifestFile, "units/dot-agentd.service", "units/invisible-dots-agent.service"}
	sort.Strings(want)
	if diff := cmp.Diff(want, names); diff != "" {
		t.Fatalf("ISO files (-want +got):\n%s", diff)
	}
	if string(files[protocol.RuntimeAgentdFile]) != "agentd binary" {
		t.Fatalf("dot-agentd on the ISO = %q", files[protocol.RuntimeAgentdFile])
	}
	var contents protocol.RuntimeContents
	if err := json.Unmarshal(files[protocol.RuntimeManifestFile], &contents); err != nil {
		t.Fatal(err)
	}
	if contents.Version != m.Version || contents.Files[protocol.RuntimeAgentdFile] != fmt.Sprintf("%x", sha256.Sum256([]byte("agentd binary"))) {
		t.Fatalf("manifest.json = %+v, want version %s and dot-agentd's digest", contents, m.Version)
	}
	// The same inputs again are a no-op; a changed binary is a new version.
	again, err := Register(h, agentd, engine, time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	if err != nil || again.Version != m.Version {
		t.Fatalf("registering unchanged inputs gave %s (%v), want %s again", again.Version, err, m.Version)
	}
	os.WriteFile(agentd, []byte("agentd binary v2"), 0o755)
	newer, err := Register(h, agentd, engine, time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	if err != nil || newer.Version == m.Version {
		t.Fatalf("a changed dot-agentd gave version %s (%v), want a new one", newer.Version, err)
	}
	if latest, _ := images.Latest(h, home.Runtime); latest.Version != newer.Version {
		t.Fatalf("the newest registered runtime is %s, want %s", latest.Version, newer.Version)
	}
}

func TestWithoutEngine(t *testing.T) {
	agentd, _ := fakeBinaries(t)
	h, _ := home.New(t.TempDir())
	m, err := Register(h, agentd, "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	_, files := readISO(t, h.Runtime(m.Version))
	if _, ok := files[protocol.RuntimeEngineFile]; ok {
		t.Fatal("an ISO built without an engine holds one")
	}
}
