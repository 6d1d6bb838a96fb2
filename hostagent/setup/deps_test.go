package setup

import (
	"context"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/invisible-dots/invisible-dots/hostagent/doctor"
	"github.com/invisible-dots/invisible-dots/internal/home"
)

// The packages setup installs are hack/deps' host group, the one list of what
// a machine needs (make run, make test and CI install from it), and are among
// its full list: neither can name a package the other does not. The doctor's
// fix for each of those rows installs the same package.
func TestPackagesAreHackDeps(t *testing.T) {
	list := func(args ...string) []string {
		out, err := exec.Command("bash", append([]string{"../../hack/deps", "--list"}, args...)...).Output()
		if err != nil {
			t.Fatalf("hack/deps --list %s: %v", strings.Join(args, " "), err)
		}
		return strings.Fields(string(out))
	}
	host, all := list("host"), list()
	var ours []string
	for _, p := range packages {
		ours = append(ours, p)
	}
	slices.Sort(ours)
	slices.Sort(host)
	if diff := cmp.Diff(host, ours); diff != "" {
		t.Errorf("setup's packages differ from hack/deps --list host (-hack/deps +setup):\n%s", diff)
	}
	for _, p := range ours {
		if !slices.Contains(all, p) {
			t.Errorf("setup installs %s, which hack/deps --list does not name", p)
		}
	}
}

func TestDoctorFixesNameSetupsPackages(t *testing.T) {
	d, _ := newHost(t).deps(t, home.Layout{Root: t.TempDir()}, 1000)
	rep := doctor.Run(context.Background(), d.Doctor)
	for row, pkg := range packages {
		c, ok := rep.Row(row)
		if !ok {
			t.Errorf("the doctor has no row %q", row)
			continue
		}
		if !strings.Contains(c.Fix+" ", "apt-get install -y "+pkg+" ") {
			t.Errorf("the doctor's fix for %s is %q, not an apt-get install of %s", row, c.Fix, pkg)
		}
	}
}
