package runtimeiso

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/invisible-dots/invisible-dots/guest/engine/memory"
	"github.com/invisible-dots/invisible-dots/guest/image/artifact"
	"github.com/invisible-dots/invisible-dots/guest/image/isofs"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// readISO returns the label and every file of an ISO by path.
func readISO(t *testing.T, path string) (string, map[string][]byte) {
	t.Helper()
	label, files, err := isofs.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	return label, files
}

func fakeBinaries(t *testing.T) (string, string) {
	dir := t.TempDir()
	a, e := filepath.Join(dir, "agentd"), filepath.Join(dir, "engine")
	os.WriteFile(a, []byte("agentd binary"), 0o755)
	os.WriteFile(e, []byte("engine binary"), 0o755)
	return a, e
}

func build(t *testing.T, agentd, engine string, now time.Time) (string, protocol.ImageManifest) {
	t.Helper()
	files, err := Contents(agentd, engine)
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	path, m, err := Build(out, files, now)
	if err != nil {
		t.Fatal(err)
	}
	if path != filepath.Join(out, ManifestFile) {
		t.Fatalf("Build() wrote its manifest to %s, want %s", path, filepath.Join(out, ManifestFile))
	}
	return out, m
}

func TestBuildWritesAReadableISO(t *testing.T) {
	agentd, engine := fakeBinaries(t)
	out, m := build(t, agentd, engine, time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	read, err := artifact.ReadManifest(filepath.Join(out, ManifestFile))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(m, read); diff != "" {
		t.Fatalf("the manifest on disk differs from the one returned (-returned +disk):\n%s", diff)
	}
	iso := filepath.Join(out, m.File)
	if sum, size, err := artifact.FileSHA256(iso); err != nil || sum != m.SHA256 || size != m.Size {
		t.Fatalf("the ISO hashes to %s, %d bytes (%v); its manifest says %s, %d", sum, size, err, m.SHA256, m.Size)
	}
	if fi, err := os.Stat(iso); err != nil || fi.Mode().Perm() != 0o444 {
		t.Fatalf("the ISO's mode = %v (%v), want read-only 0444", fi.Mode().Perm(), err)
	}
	label, files := readISO(t, iso)
	if label != protocol.RuntimeVolumeLabel {
		t.Fatalf("label %q, want %q", label, protocol.RuntimeVolumeLabel)
	}
	var names []string
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	// Plain ISO 9660 names: a guest sees SKILL.md as skill.md, which the
	// engine reads (memory.Skills).
	want := []string{protocol.RuntimeAgentdFile, protocol.RuntimeEngineFile, protocol.RuntimeManifestFile, "units/dot-agentd.service", "units/invisible-dots-agent.service",
		protocol.RuntimeSkillsDir + "/invisible-playwright/skill.md"}
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
}

// The version ends in the files' Sum: the same files give the same one, a
// changed binary another, so a registered ISO of the same files can be found.
func TestVersionSaysWhatTheISOHolds(t *testing.T) {
	agentd, engine := fakeBinaries(t)
	_, m := build(t, agentd, engine, time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	_, again := build(t, agentd, engine, time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	files, _ := Contents(agentd, engine)
	digest := func(version string) string { _, d, _ := strings.Cut(version, "-"); return d }
	if digest(m.Version) != Sum(files) || digest(again.Version) != Sum(files) {
		t.Fatalf("the same files gave versions %s and %s, want both to end in the files' sum %s", m.Version, again.Version, Sum(files))
	}
	os.WriteFile(agentd, []byte("agentd binary v2"), 0o755)
	_, newer := build(t, agentd, engine, time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	if newer.Version == m.Version {
		t.Fatalf("a changed dot-agentd gave version %s again, want a new one", newer.Version)
	}
}

func TestWithoutEngine(t *testing.T) {
	agentd, _ := fakeBinaries(t)
	out, m := build(t, agentd, "", time.Now())
	_, files := readISO(t, filepath.Join(out, m.File))
	if _, ok := files[protocol.RuntimeEngineFile]; ok {
		t.Fatal("an ISO built without an engine holds one")
	}
}

// TestEngineUnitReadsTheSeedsEnvironment: the engine's unit reads the
// environment file the seed's user-data writes, and tolerates its absence.
func TestEngineUnitReadsTheSeedsEnvironment(t *testing.T) {
	unit, err := units.ReadFile("units/invisible-dots-agent.service")
	if err != nil {
		t.Fatal(err)
	}
	if want := "EnvironmentFile=-" + protocol.EngineEnvPath + "\n"; !strings.Contains(string(unit), want) {
		t.Errorf("the engine's unit lacks %q:\n%s", want, unit)
	}
}

// TestUnitsStopBeforeTheirISOIsUnmounted: both units run programs of the
// runtime ISO, so each requires its mount (stopped before the unmount at a
// poweroff), and the engine is killed 30 s after SIGTERM at most (ref 8.7).
func TestUnitsStopBeforeTheirISOIsUnmounted(t *testing.T) {
	for name, wants := range map[string][]string{
		"units/dot-agentd.service":           {"RequiresMountsFor=" + protocol.RuntimeMountPoint + "\n"},
		"units/invisible-dots-agent.service": {"RequiresMountsFor=" + protocol.RuntimeMountPoint + "\n", "TimeoutStopSec=30\n"},
	} {
		unit, err := units.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range wants {
			if !strings.Contains(string(unit), want) {
				t.Errorf("%s lacks %q:\n%s", name, want, unit)
			}
		}
	}
}

// TestBuiltinSkillsShipAndParse: the runtime ISO carries the built-in skills
// where the engine reads them, and the engine reads each as a built-in skill
// (frontmatter name = folder, a one-line description); the first is the
// browser identities' one, written for @playwright/mcp's tools.
func TestBuiltinSkillsShipAndParse(t *testing.T) {
	agentd, engine := fakeBinaries(t)
	out, m := build(t, agentd, engine, time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	_, files := readISO(t, filepath.Join(out, m.File))
	dir := t.TempDir()
	n := 0
	for name, data := range files {
		rest, ok := strings.CutPrefix(name, protocol.RuntimeSkillsDir+"/")
		if !ok {
			continue
		}
		n++
		p := filepath.Join(dir, filepath.FromSlash(rest))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if n == 0 {
		t.Fatalf("the runtime ISO holds no file under %s", protocol.RuntimeSkillsDir)
	}
	got, err := (&memory.Memory{BuiltinSkills: dir}).Skills(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != n || got[0].Name != "invisible-playwright" || got[0].Source != protocol.SkillBuiltin || got[0].Description == "" {
		t.Fatalf("skills read from the ISO's files = %+v, want invisible-playwright among %d built-in ones", got, n)
	}
	body := string(files[protocol.RuntimeSkillsDir+"/invisible-playwright/skill.md"])
	for _, tool := range []string{"browser_identity_list", "browser_identity_launch", "browser_identity_close", "browser_snapshot", "browser_navigate"} {
		if !strings.Contains(body, tool) {
			t.Errorf("the browser skill does not name %s", tool)
		}
	}
}
