package golden

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestHostSources(t *testing.T) {
	tests := map[string]struct {
		reason string
		files  map[string]string
		want   string
		err    string
	}{
		"debian deb822": {
			reason: "Debian 12's own sources file is taken as it is",
			files: map[string]string{"debian.sources": `Types: deb
# a comment
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
`},
			want: `Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

`,
		},
		"other sources left out": {
			reason: "a vendor's repository (nodistro), backports, a deb-src and a disabled stanza would put other packages in the image",
			files: map[string]string{
				"nodesource.sources": "Types: deb\nURIs: https://deb.nodesource.com/node_20.x\nSuites: nodistro\nComponents: main\n",
				"google.list":        "deb https://packages.cloud.google.com/apt cloud-sdk-bookworm main\n",
				"debian.list":        "deb [signed-by=/k.gpg arch=amd64] http://mirror/debian bookworm main contrib\ndeb-src http://mirror/debian bookworm main\ndeb http://mirror/debian bookworm-backports main\n",
				"off.sources":        "Types: deb\nURIs: http://x/debian\nSuites: bookworm\nComponents: main\nEnabled: no\n",
			},
			want: "Types: deb\nURIs: http://mirror/debian\nSuites: bookworm\nComponents: main contrib\nSigned-By: /k.gpg\n\n",
		},
		"nothing for bookworm": {
			reason: "a host without Debian 12's archive cannot build the image",
			files:  map[string]string{"nodesource.sources": "Types: deb\nURIs: https://deb.nodesource.com/node_20.x\nSuites: nodistro\nComponents: main\n"},
			err:    "no apt source of this host names bookworm",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			var files []string
			for n, body := range tc.files {
				p := filepath.Join(dir, n)
				if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
				files = append(files, p)
			}
			got, err := hostSources(files)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("%s: hostSources() error = %v, want one naming %q", tc.reason, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("%s: hostSources() = %v", tc.reason, err)
			}
			if diff := cmp.Diff(tc.want, string(got)); diff != "" {
				t.Errorf("%s: sources (-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}

func TestProgress(t *testing.T) {
	var lines []string
	now := time.Unix(0, 0)
	p := newProgress(func(f string, a ...any) { lines = append(lines, strings.TrimSpace(fmt.Sprintf(f, a...))) })
	p.now = func() time.Time { now = now.Add(2 * time.Second); return now }
	for _, l := range []string{
		"I: running special hook: sync-in /work/_output/golden-image/debs /var/cache/apt/archives/",
		"I: running --customize-hook in shell: sh -c 'chroot \"$1\" /bin/sh -eu /tmp/provision.sh' exec /work/x/root",
		"I: downloading packages with apt...",
		"Get:1 http://deb.debian.org/debian bookworm/main amd64 libc6 amd64 2.36-9+deb12u13 [2757 kB]",
		"Get:2 http://deb.debian.org/debian bookworm/main amd64 chromium amd64 142.0 [1,234 kB]",
		"Get:3 http://deb.debian.org/debian bookworm/main amd64 fonts amd64 1 [5.5 MB]",
		"Unpacking libc6 ...",
		"Fetched 9491 kB in 1s (9000 kB/s)",
		"Fetched 9491 kB in 1s (9000 kB/s)",
		"E: something failed",
	} {
		p.line(l)
	}
	p.finish()
	want := []string{
		"running special hook: sync-in",
		"running --customize-hook in shell",
		"downloading packages with apt...",
		"downloading: 1 files, 2.8 MB",
		"downloading: 3 files, 9.5 MB",
		"downloaded 3 files, 9491 kB in 1s",
		"E: something failed",
	}
	if diff := cmp.Diff(want, lines); diff != "" {
		t.Errorf("progress lines (-want +got):\n%s", diff)
	}
}
