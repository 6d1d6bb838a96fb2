package doctor

import (
	"context"
	"fmt"
	"testing"

	"github.com/invisible-dots/invisible-dots/internal/home"
)

func TestWebClientRow(t *testing.T) {
	for _, built := range []bool{true, false} {
		h := home.Layout{Root: t.TempDir()}
		d := goodMachine(t).deps(t, h)
		d.WebClientBuilt = func() bool { return built }
		rep := Run(context.Background(), d)
		row, ok := rep.Row(RowWebClient)
		want := OK
		if !built {
			want = Warning
		}
		if !ok || row.Status != want {
			t.Errorf("built %v: row %+v (present %v); want %s", built, row, ok, want)
		}
		if !built && row.Fix != "make build" {
			t.Errorf("a missing client's row says fix %q, want make build", row.Fix)
		}
		checkFixes(t, fmt.Sprintf("built %v", built), rep)
	}
	// Without the dependency the row is left out, as the key's is.
	d := goodMachine(t).deps(t, home.Layout{Root: t.TempDir()})
	if _, ok := Run(context.Background(), d).Row(RowWebClient); ok {
		t.Errorf("the row is there without WebClientBuilt")
	}
}
