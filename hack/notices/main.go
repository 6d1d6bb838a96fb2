// Command notices writes THIRD_PARTY_NOTICES.md: every third-party module the
// programs of this repository link (the invisible-dots binary, and dot-agentd,
// dot-engine and dots-launch on the runtime disk), read from the Go module
// graph, and every package the web client's build embeds, read from its lock
// file, each with its license text. Nothing in it is written by hand, so it
// cannot drift from what is built: notices_test.go fails when the file
// differs from what this program writes now.
//
//	go run ./hack/notices            # write THIRD_PARTY_NOTICES.md at the repository root
//	go run ./hack/notices -check     # say whether it is current, change nothing
//
// Run it from the repository root. It needs the Go module cache (go list
// fills it) and web/node_modules (npm ci in web/) for the web packages'
// license texts.
package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// NoticesFile is the file this program owns, at the repository root.
const NoticesFile = "THIRD_PARTY_NOTICES.md"

// programs are the main packages whose linked modules are listed: what this
// repository ships. The opt-in WhatsApp program is a module of its own
// (internal/channels/whatsapp) and is not among them: see the header.
var programs = []string{
	".",
	"./guest/agentd/cmd/dot-agentd",
	"./guest/engine/cmd/dot-engine",
	"./guest/image/cmd/dots-launch",
}

// licenseFile matches the names a module's license and notice files go by.
var licenseFile = regexp.MustCompile(`(?i)^(licen[cs]e|copying|notice|unlicense)([-._][a-z0-9.-]*)?$`)

func main() {
	check := flag.Bool("check", false, "only say whether "+NoticesFile+" is current")
	flag.Parse()
	want, err := Generate(".")
	if err != nil {
		fmt.Fprintln(os.Stderr, "notices:", err)
		os.Exit(1)
	}
	if *check {
		have, err := os.ReadFile(NoticesFile)
		if err != nil || !bytes.Equal(have, want) {
			fmt.Fprintln(os.Stderr, "notices: "+NoticesFile+" is out of date: run 'go run ./hack/notices' and commit it")
			os.Exit(1)
		}
		return
	}
	if err := os.WriteFile(NoticesFile, want, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "notices:", err)
		os.Exit(1)
	}
}

// component is one third-party module or package and its license files.
type component struct {
	Name, Version string
	// License is the SPDX expression its package declares (npm), empty
	// for Go modules, which declare none: their files say it.
	License string
	// Files are its license files' names, in order, with their texts.
	Files []licenseText
}

type licenseText struct {
	Name, Text string
}

// Generate returns the notices of the repository at root.
func Generate(root string) ([]byte, error) {
	mods, err := goModules(root)
	if err != nil {
		return nil, err
	}
	pkgs, err := webPackages(root)
	if err != nil {
		return nil, err
	}
	return render(mods, pkgs), nil
}

// goModule is what go list -json says of a package's module.
type goModule struct {
	Path, Version, Dir string
	Main               bool
	Replace            *goModule
}

// goModules lists the modules the programs link, with their license files.
func goModules(root string) ([]component, error) {
	cmd := exec.Command("go", append([]string{"list", "-deps", "-json=Module"}, programs...)...)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list the programs' modules: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	seen := map[string]bool{}
	var mods []component
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct{ Module *goModule }
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("read go list's answer: %w", err)
		}
		m := p.Module
		if m == nil || m.Main || seen[m.Path] {
			continue // the standard library, or this repository
		}
		seen[m.Path] = true
		version, dir := m.Version, m.Dir
		if m.Replace != nil {
			// k8s.io/kubernetes' staging modules are replaced by their
			// published versions (DESIGN 2): the replacement is what links.
			version, dir = m.Replace.Version, m.Replace.Dir
		}
		if dir == "" {
			return nil, fmt.Errorf("module %s has no directory in the module cache: run 'go mod download' first", m.Path)
		}
		files, err := licenseFiles(dir)
		if err != nil {
			return nil, fmt.Errorf("module %s: %w", m.Path, err)
		}
		mods = append(mods, component{Name: m.Path, Version: version, Files: files})
	}
	slices.SortFunc(mods, func(a, b component) int { return strings.Compare(a.Name, b.Name) })
	return mods, nil
}

// webPackages lists the packages of the web client's lock file that its
// build embeds (those not marked dev), with their license files from
// web/node_modules.
func webPackages(root string) ([]component, error) {
	raw, err := os.ReadFile(filepath.Join(root, "web", "package-lock.json"))
	if err != nil {
		return nil, fmt.Errorf("read the web client's lock file: %w", err)
	}
	var lock struct {
		Packages map[string]struct {
			Version     string
			License     string
			Dev         bool
			DevOptional bool
		}
	}
	if err := json.Unmarshal(raw, &lock); err != nil {
		return nil, fmt.Errorf("read web/package-lock.json: %w", err)
	}
	var pkgs []component
	for path, p := range lock.Packages {
		if path == "" || p.Dev || p.DevOptional {
			continue // the web client itself, or a package only its build and tests use
		}
		dir := filepath.Join(root, "web", filepath.FromSlash(path))
		if _, err := os.Stat(dir); err != nil {
			return nil, fmt.Errorf("%s is not installed (%v): run 'npm ci' in web/ first", path, err)
		}
		files, err := licenseFiles(dir)
		if err != nil {
			return nil, fmt.Errorf("web package %s: %w", path, err)
		}
		pkgs = append(pkgs, component{Name: strings.TrimPrefix(path, "node_modules/"), Version: p.Version, License: p.License, Files: files})
	}
	slices.SortFunc(pkgs, func(a, b component) int { return strings.Compare(a.Name, b.Name) })
	return pkgs, nil
}

// licenseFiles reads the license and notice files at the top of dir.
func licenseFiles(dir string) ([]licenseText, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var files []licenseText
	for _, e := range entries {
		if e.IsDir() || !licenseFile.MatchString(e.Name()) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		files = append(files, licenseText{Name: e.Name(), Text: normalize(string(b))})
	}
	return files, nil
}

// normalize makes two copies of one text equal whatever their line ends and
// trailing blanks, so a text shared by many modules is printed once.
func normalize(s string) string {
	s = strings.ReplaceAll(s, "\r\n", "\n")
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " \t")
	}
	return strings.Trim(strings.Join(lines, "\n"), "\n")
}

const header = `# Third-party notices

This file is generated by ` + "`go run ./hack/notices`" + ` (do not edit it; a test fails when it is not
current). It lists what the programs built from this repository contain that others wrote, and the
license texts that come with each:

- the Go modules linked into ` + "`invisible-dots`" + ` and into the guest's programs on the runtime disk
  (` + "`dot-agentd`, `dot-engine`, `dots-launch`" + `), read from the Go module graph (` + "`go list -deps`" + `);
- the npm packages the web client's build embeds in the binary, read from ` + "`web/package-lock.json`" + `
  (the packages it marks for development only, the build tools and the test runner, are not shipped).

Not listed here, because nothing of them is in those programs: QEMU, PostgreSQL, Chromium, kubectl and
the other programs the server runs beside itself (each installed from Debian's packages under its own
license); the Debian packages the golden image is built from, and ` + "`@playwright/mcp`" + ` installed into
it, which go with any copy of that image under their own licenses; and the opt-in WhatsApp program
(` + "`internal/channels/whatsapp`" + `, a module of its own), which links whatsmeow's Signal library under
the GPL-3.0 and is built only on request.
`

// render writes the notices: the two lists, then each distinct license text
// once with the components it covers.
func render(mods, pkgs []component) []byte {
	var b strings.Builder
	b.WriteString(header)
	type text struct {
		id, body string
		users    []string
	}
	var texts []*text
	byHash := map[[32]byte]*text{}
	ref := func(c component) string {
		if len(c.Files) == 0 {
			return "no license file in the package"
		}
		var ids []string
		for _, f := range c.Files {
			h := sha256.Sum256([]byte(f.Text))
			t, ok := byHash[h]
			if !ok {
				t = &text{id: fmt.Sprintf("T%d", len(texts)+1), body: f.Text}
				byHash[h] = t
				texts = append(texts, t)
			}
			t.users = append(t.users, c.Name+" ("+f.Name+")")
			ids = append(ids, "["+f.Name+"](#"+strings.ToLower(t.id)+")")
		}
		return strings.Join(ids, ", ")
	}
	fmt.Fprintf(&b, "\n## Go modules (%d)\n\n| module | version | license files |\n|---|---|---|\n", len(mods))
	for _, m := range mods {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", m.Name, m.Version, ref(m))
	}
	fmt.Fprintf(&b, "\n## Web client packages (%d)\n\n| package | version | license (declared) | license files |\n|---|---|---|---|\n", len(pkgs))
	for _, p := range pkgs {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", p.Name, p.Version, p.License, ref(p))
	}
	fmt.Fprintf(&b, "\n## License texts (%d distinct)\n", len(texts))
	for _, t := range texts {
		fence := "```"
		for strings.Contains(t.body, fence) {
			fence += "`"
		}
		fmt.Fprintf(&b, "\n### %s\n\nFrom: %s.\n\n%s text\n%s\n%s\n", t.id, strings.Join(t.users, ", "), fence, t.body, fence)
	}
	return []byte(b.String())
}
