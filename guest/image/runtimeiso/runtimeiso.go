// Package runtimeiso writes the runtime ISO (ref 3.3): our code for the
// guest, attached read-only to every VM and mounted at
// /opt/invisible-dots: dot-agentd, the engine when it is built, the systemd
// units and a manifest of what it holds. It is written by guest/image/isofs,
// so no ISO tool is needed on any host. Build writes it into a folder (see
// guest/image/artifact); hostagent/images registers it in a home.
package runtimeiso

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/invisible-dots/invisible-dots/guest/image/artifact"
	"github.com/invisible-dots/invisible-dots/guest/image/isofs"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

//go:embed units
var units embed.FS

// skills are the engine's built-in skills (ref 8.6), shipped beside it at
// RuntimeSkillsDir: the first says how to use the browser identities with
// @playwright/mcp's tools. A Dot's own skill of the same name replaces one.
//
//go:embed skills
var skills embed.FS

// Contents returns the ISO's files by path: the binaries given (an empty
// path is left out), the units, and manifest.json listing each file's
// SHA-256 under version.
func Contents(agentd, engine string) (map[string][]byte, error) {
	files := map[string][]byte{}
	for _, b := range []struct{ name, path string }{{protocol.RuntimeAgentdFile, agentd}, {protocol.RuntimeEngineFile, engine}} {
		if b.path == "" {
			continue
		}
		data, err := os.ReadFile(b.path)
		if err != nil {
			return nil, fmt.Errorf("read %s for the runtime ISO: %w", b.name, err)
		}
		files[b.name] = data
	}
	err := fs.WalkDir(units, "units", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := units.ReadFile(p)
		files[protocol.RuntimeUnitsDir+"/"+path.Base(p)] = data
		return err
	})
	if err != nil {
		return nil, err
	}
	err = fs.WalkDir(skills, "skills", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := skills.ReadFile(p)
		files[protocol.RuntimeSkillsDir+"/"+strings.TrimPrefix(p, "skills/")] = data
		return err
	})
	return files, err
}

// Digest is the SHA-256 of the files (names and contents), the part of the
// version that says what the ISO holds.
func Digest(files map[string][]byte) string {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	h := sha256.New()
	for _, n := range names {
		fmt.Fprintf(h, "%s %x\n", n, sha256.Sum256(files[n]))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Sum is the last part of a runtime ISO's version: the first 16 hex
// characters of the files' Digest.
func Sum(files map[string][]byte) string { return Digest(files)[:16] }

// Write writes an ISO holding files plus manifest.json for version.
func Write(dest, version string, files map[string][]byte) error {
	manifest := protocol.RuntimeContents{Version: version, Files: map[string]string{}}
	for n, data := range files {
		manifest.Files[n] = fmt.Sprintf("%x", sha256.Sum256(data))
	}
	mb, err := json.MarshalIndent(manifest, "", "  ")
	if err != nil {
		return err
	}
	all := map[string][]byte{protocol.RuntimeManifestFile: append(mb, '\n')}
	for n, d := range files {
		all[n] = d
	}
	return isofs.Write(dest, protocol.RuntimeVolumeLabel, all, 0o444)
}

// Output names in the folder Build writes to.
const (
	ISOFile      = "runtime.iso"
	ManifestFile = "runtime.json"
)

// Build writes the runtime ISO of files (see Contents) into out as ISOFile,
// beside its manifest ManifestFile, and returns the manifest's path and
// contents. The version is the build time and the files' Sum, so an ISO of
// the same files can be found by it.
func Build(out string, files map[string][]byte, now time.Time) (string, protocol.ImageManifest, error) {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return "", protocol.ImageManifest{}, fmt.Errorf("make the output folder %s: %w", out, err)
	}
	version := now.UTC().Format("20060102T150405Z") + "-" + Sum(files)
	dest := filepath.Join(out, ISOFile)
	if err := Write(dest, version, files); err != nil {
		return "", protocol.ImageManifest{}, err
	}
	_, withEngine := files[protocol.RuntimeEngineFile]
	m := protocol.ImageManifest{
		Kind: protocol.ImageKindRuntime, Version: version, File: ISOFile,
		Created:     now.UTC().Format(time.RFC3339),
		Description: "runtime ISO: dot-agentd, units" + map[bool]string{true: ", dot-engine", false: ""}[withEngine],
		Inputs:      map[string]string{},
	}
	for n, data := range files {
		m.Inputs[n] = fmt.Sprintf("%x", sha256.Sum256(data))
	}
	var err error
	if m.SHA256, m.Size, err = artifact.FileSHA256(dest); err != nil {
		return "", protocol.ImageManifest{}, err
	}
	mp := filepath.Join(out, ManifestFile)
	if err := artifact.WriteManifest(mp, m); err != nil {
		return "", protocol.ImageManifest{}, err
	}
	return mp, m, nil
}
