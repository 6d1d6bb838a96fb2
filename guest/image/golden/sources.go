package golden

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Suites are the suites of Suite the image takes packages from: the release,
// its updates and its security updates. Any other source of the host
// (backports, a vendor's repository) is left out, so a package such as
// nodejs comes from Debian even where the host has another one.
var Suites = []string{Suite, Suite + "-updates", Suite + "-security"}

// hostSources reads the host's apt sources (files, or the default places)
// and returns the entries for Suites, as one deb822 sources file for
// mmdebstrap. It fails when none is left.
func hostSources(files []string) ([]byte, error) {
	if files == nil {
		if _, err := os.Stat("/etc/apt/sources.list"); err == nil {
			files = append(files, "/etc/apt/sources.list")
		}
		for _, pat := range []string{"/etc/apt/sources.list.d/*.list", "/etc/apt/sources.list.d/*.sources"} {
			m, _ := filepath.Glob(pat)
			sort.Strings(m)
			files = append(files, m...)
		}
	}
	var out bytes.Buffer
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("read the apt sources %s: %w", f, err)
		}
		var entries []sourceEntry
		if strings.HasSuffix(f, ".sources") {
			entries = parseDeb822(string(data))
		} else {
			entries = parseOneLine(string(data))
		}
		for _, e := range entries {
			e.Suites = keep(e.Suites, Suites)
			if len(e.Suites) == 0 || !contains(e.Types, "deb") {
				continue
			}
			out.WriteString(e.deb822())
		}
	}
	if out.Len() == 0 {
		return nil, fmt.Errorf("no apt source of this host names %s (looked in %s): add Debian 12's archive to apt's sources", strings.Join(Suites, ", "), strings.Join(files, ", "))
	}
	return out.Bytes(), nil
}

type sourceEntry struct {
	Types, URIs, Suites, Components []string
	SignedBy                        string
}

func (e sourceEntry) deb822() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Types: deb\nURIs: %s\nSuites: %s\nComponents: %s\n", strings.Join(e.URIs, " "), strings.Join(e.Suites, " "), strings.Join(e.Components, " "))
	if e.SignedBy != "" {
		fmt.Fprintf(&b, "Signed-By: %s\n", e.SignedBy)
	}
	b.WriteString("\n")
	return b.String()
}

// parseDeb822 reads the stanzas of a .sources file; a stanza with
// "Enabled: no" is left out. A Signed-By that holds a key itself (several
// lines) is not carried over: mmdebstrap then finds the key as apt does.
func parseDeb822(s string) []sourceEntry {
	var out []sourceEntry
	for _, stanza := range strings.Split(strings.ReplaceAll(s, "\r\n", "\n"), "\n\n") {
		var e sourceEntry
		enabled := true
		for _, line := range strings.Split(stanza, "\n") {
			if strings.HasPrefix(line, "#") || strings.HasPrefix(line, " ") || strings.HasPrefix(line, "\t") {
				continue
			}
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			v = strings.TrimSpace(v)
			switch strings.ToLower(k) {
			case "types":
				e.Types = strings.Fields(v)
			case "uris":
				e.URIs = strings.Fields(v)
			case "suites":
				e.Suites = strings.Fields(v)
			case "components":
				e.Components = strings.Fields(v)
			case "signed-by":
				e.SignedBy = v
			case "enabled":
				enabled = strings.ToLower(v) != "no"
			}
		}
		if enabled && len(e.URIs) > 0 && len(e.Suites) > 0 {
			out = append(out, e)
		}
	}
	return out
}

// parseOneLine reads "deb [options] uri suite component..." lines.
func parseOneLine(s string) []sourceEntry {
	var out []sourceEntry
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if i := strings.Index(line, "#"); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		f := strings.Fields(line)
		if len(f) < 3 {
			continue
		}
		e := sourceEntry{Types: []string{f[0]}}
		rest := f[1:]
		if strings.HasPrefix(rest[0], "[") {
			var opts []string
			for len(rest) > 0 {
				opts = append(opts, rest[0])
				done := strings.HasSuffix(rest[0], "]")
				rest = rest[1:]
				if done {
					break
				}
			}
			for _, o := range strings.Fields(strings.Trim(strings.Join(opts, " "), "[]")) {
				if v, ok := strings.CutPrefix(o, "signed-by="); ok {
					e.SignedBy = v
				}
			}
		}
		if len(rest) < 2 {
			continue
		}
		e.URIs, e.Suites, e.Components = rest[:1], rest[1:2], rest[2:]
		out = append(out, e)
	}
	return out
}

// suitesOf lists the suites a sources file (as hostSources writes it) names.
func suitesOf(sources []byte) []string {
	seen := map[string]bool{}
	var out []string
	for _, e := range parseDeb822(string(sources)) {
		for _, s := range e.Suites {
			if !seen[s] {
				seen[s] = true
				out = append(out, s)
			}
		}
	}
	return out
}

func keep(have, allowed []string) []string {
	var out []string
	for _, h := range have {
		if contains(allowed, h) {
			out = append(out, h)
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
