package home

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestReadBoot(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	id := write("boot_id", "0b5a52c4-1a7e-4a54-8f66-3c1f7e1e2b11\n")
	up := write("uptime", "12345.67 2345.01\n")
	bad := write("bad", "soon\n")

	got, err := readBoot(id, up)
	if err != nil {
		t.Fatal(err)
	}
	want := Stamp{BootID: "0b5a52c4-1a7e-4a54-8f66-3c1f7e1e2b11", HostUptimeS: 12345.67}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("readBoot() mismatch (-want +got):\n%s", diff)
	}
	if got, err := readBoot(filepath.Join(dir, "absent"), up); err != nil || got.BootID != "" {
		t.Errorf("readBoot() without a boot id = %+v, %v; want empty id and no error", got, err)
	}
	if _, err := readBoot(id, bad); err == nil {
		t.Error("readBoot() of an uptime that is not a number: want an error")
	}
}

func TestCurrentBoot(t *testing.T) {
	if _, err := os.Stat(uptimePath); err != nil {
		t.Skipf("no %s on this host", uptimePath)
	}
	a, err := CurrentBoot()
	if err != nil {
		t.Fatal(err)
	}
	if a.HostUptimeS <= 0 {
		t.Errorf("CurrentBoot() uptime = %v, want > 0", a.HostUptimeS)
	}
	b, err := CurrentBoot()
	if err != nil {
		t.Fatal(err)
	}
	if !b.SameBoot(a) {
		t.Errorf("two reads in a row are not the same boot: %+v then %+v", a, b)
	}
}

func TestSameBoot(t *testing.T) {
	tests := map[string]struct {
		reason   string
		now, rec Stamp
		want     bool
	}{
		"same id":              {"boot ids match", Stamp{"a", 100}, Stamp{"a", 50}, true},
		"other id":             {"a record from another boot id is stale even with a smaller uptime", Stamp{"b", 100}, Stamp{"a", 50}, false},
		"other id, more up":    {"boot id decides", Stamp{"b", 100}, Stamp{"a", 500}, false},
		"no ids, earlier":      {"uptime only: smaller uptime is this boot", Stamp{"", 100}, Stamp{"", 50}, true},
		"no ids, later":        {"uptime only: greater uptime is an earlier boot", Stamp{"", 100}, Stamp{"", 500}, false},
		"record without id":    {"an old record without boot id falls back to uptime", Stamp{"a", 100}, Stamp{"", 500}, false},
		"record without id ok": {"an old record without boot id falls back to uptime", Stamp{"a", 100}, Stamp{"", 5}, true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := tc.now.SameBoot(tc.rec); got != tc.want {
				t.Errorf("%s: %+v.SameBoot(%+v) = %v, want %v", tc.reason, tc.now, tc.rec, got, tc.want)
			}
		})
	}
}
