package upstreamlog

import (
	"errors"
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"
)

// A known line shows as info at its level and never as an error; another
// error with the same message, and every other error, still shows as one.
func TestQuiet(t *testing.T) {
	known := NotError{Msg: "error received after stop sequence was engaged", Err: "leader election lost"}
	for _, verbosity := range []int{0, 1} {
		var lines []string
		base := funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{Verbosity: verbosity})
		log := Quiet(base, 1, known, NotError{Msg: "The manifest file is empty, ignoring."}).WithName("x").WithValues("k", "v")
		log.Error(errors.New("leader election lost"), known.Msg)
		log.Error(nil, "The manifest file is empty, ignoring.")
		log.Error(errors.New("boom"), known.Msg)
		log.Error(nil, "a real one")
		log.V(1).Info("the library's info")
		var errs, infos []string
		for _, l := range lines {
			if strings.Contains(l, `"error"=`) {
				errs = append(errs, l)
			} else {
				infos = append(infos, l)
			}
		}
		if len(errs) != 2 || !strings.Contains(errs[0], "boom") || !strings.Contains(errs[1], "a real one") {
			t.Errorf("-v %d: errors logged:\n%s\nwant boom and a real one", verbosity, strings.Join(errs, "\n"))
		}
		if want := map[int]int{0: 0, 1: 3}[verbosity]; len(infos) != want {
			t.Errorf("-v %d: %d info lines, want %d:\n%s", verbosity, len(infos), want, strings.Join(infos, "\n"))
		}
	}
}
