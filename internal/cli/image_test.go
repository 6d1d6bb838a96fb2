package cli

import (
	"strings"
	"testing"

	"github.com/invisible-dots/invisible-dots/internal/home"
)

// image build ends by saying which running Dots wait for the newest
// runtime ISO (ref 3.3: it reaches each at its next start).
func TestRolloutTextNamesTheDotsThatWait(t *testing.T) {
	const old, newest = "20261201T000000Z-aaaa", "20261204T000000Z-bbbb"
	id := func(ns, name string) home.VMID { return home.VMID{Namespace: ns, Name: name} }
	tests := map[string]struct {
		inUse map[home.VMID]string
		want  []string
	}{
		"none running": {nil, []string{"no Dot of this host runs now"}},
		"all current":  {map[home.VMID]string{id("default", "a"): newest}, []string{"every running Dot of this host (1) runs it"}},
		"one waits": {map[home.VMID]string{id("default", "a"): newest, id("team", "b"): old},
			[]string{"1 running Dot waits for it (team/b)", "invisible-dots computer reboot NAME -n NAMESPACE"}},
		"two wait": {map[home.VMID]string{id("default", "z"): old, id("default", "a"): old},
			[]string{"2 running Dots wait for it (default/a, default/z)"}},
	}
	for name, tc := range tests {
		got := rolloutText(newest, tc.inUse)
		for _, w := range append(tc.want, newest) {
			if !strings.Contains(got, w) {
				t.Errorf("%s: %q; want %q in it", name, got, w)
			}
		}
	}
}
