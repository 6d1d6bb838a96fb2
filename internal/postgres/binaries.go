package postgres

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// debianBinRoot is where Debian and Ubuntu install the server binaries, one
// directory per major version; they are not on PATH there.
const debianBinRoot = "/usr/lib/postgresql"

// serverPrograms are the programs a managed instance runs. pg_ctl is not among
// them: the server runs postgres itself as a child so that the child's life is
// tied to ours (see managed.go).
var serverPrograms = []string{"initdb", "postgres"}

// findBinDir returns the directory that holds every server program: PATH
// first (a person who put a build on PATH means it), then the newest major
// version under /usr/lib/postgresql. When an existing data directory names its
// major version (wantMajor), only binaries of that version can open it.
func findBinDir(wantMajor string) (string, error) {
	var candidates []string
	if p, err := exec.LookPath("postgres"); err == nil {
		if abs, err := filepath.Abs(filepath.Dir(p)); err == nil {
			candidates = append(candidates, abs)
		}
	}
	candidates = append(candidates, versionDirs(debianBinRoot)...)
	var seen []string
	for _, dir := range candidates {
		if !hasPrograms(dir) {
			continue
		}
		if wantMajor == "" {
			return dir, nil
		}
		major, err := majorOf(dir)
		if err != nil {
			continue
		}
		if major == wantMajor {
			return dir, nil
		}
		seen = append(seen, dir+" ("+major+")")
	}
	if wantMajor != "" && len(seen) > 0 {
		return "", fmt.Errorf("the data directory was made by PostgreSQL %s but only other versions are installed (%s): install PostgreSQL %s server binaries or upgrade the data directory with pg_upgrade",
			wantMajor, strings.Join(seen, ", "), wantMajor)
	}
	return "", errors.New("no PostgreSQL server binaries found (initdb and postgres on PATH or in " +
		debianBinRoot + "/*/bin): install them (Debian: apt-get install postgresql) or set DATABASE_URL to an existing server")
}

// majorOf asks dir's postgres for its version and returns the major version
// in the form PG_VERSION uses ("15", or "9.6" before version 10).
func majorOf(dir string) (string, error) {
	out, err := exec.Command(program(dir, "postgres"), "--version").Output()
	if err != nil {
		return "", fmt.Errorf("run %s --version: %w", program(dir, "postgres"), err)
	}
	// "postgres (PostgreSQL) 15.14 (Debian 15.14-0+deb12u1)"
	fields := strings.Fields(string(out))
	for i, f := range fields {
		if f == "(PostgreSQL)" && i+1 < len(fields) {
			return majorFromVersion(fields[i+1])
		}
	}
	return "", fmt.Errorf("cannot read the version in %q", strings.TrimSpace(string(out)))
}

func majorFromVersion(v string) (string, error) {
	// Development builds say "17devel" or "16beta1": keep the leading digits.
	parts := strings.SplitN(v, ".", 3)
	first := parts[0]
	if i := strings.IndexFunc(first, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		first = first[:i]
	}
	n, err := strconv.Atoi(first)
	if err != nil {
		return "", fmt.Errorf("cannot read the version %q", v)
	}
	if n >= 10 || len(parts) < 2 {
		return first, nil
	}
	return first + "." + parts[1], nil
}

// versionDirs lists root/<version>/bin, newest version first. Versions compare
// as numbers, so 9.6 sorts below 10.
func versionDirs(root string) []string {
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil
	}
	type versioned struct {
		dir string
		v   []int
	}
	var found []versioned
	for _, e := range entries {
		v, ok := parseVersion(e.Name())
		if !ok {
			continue
		}
		found = append(found, versioned{dir: filepath.Join(root, e.Name(), "bin"), v: v})
	}
	sort.SliceStable(found, func(i, j int) bool { return versionLess(found[j].v, found[i].v) })
	dirs := make([]string, len(found))
	for i, f := range found {
		dirs[i] = f.dir
	}
	return dirs
}

func parseVersion(s string) ([]int, bool) {
	parts := strings.Split(s, ".")
	v := make([]int, len(parts))
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return nil, false
		}
		v[i] = n
	}
	return v, true
}

func versionLess(a, b []int) bool {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return len(a) < len(b)
}

func hasPrograms(dir string) bool {
	for _, p := range serverPrograms {
		st, err := os.Stat(filepath.Join(dir, p))
		if err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}

// program returns the absolute path of one server program in dir.
func program(dir, name string) string {
	return filepath.Join(dir, name)
}
