package golden

import (
	"regexp"
	"strconv"
	"strings"
	"time"
)

// progress turns mmdebstrap's --verbose output into the terminal's lines: a
// line for each of its stages ("I: ..."), and while apt downloads, the count
// of packages and bytes every few seconds and at the end. The full output
// goes to a log file beside the cache; the terminal gets these lines only.
type progress struct {
	log func(format string, args ...any)
	now func() time.Time
	// Download counters of the current apt run.
	pkgs, bytes int64
	last        time.Time
	fetching    bool
}

func newProgress(log func(string, ...any)) *progress {
	return &progress{log: log, now: time.Now}
}

// aptGet is apt's line for one download: "Get:12 http://... bookworm/main
// amd64 libc6 amd64 2.36-9 [2757 kB]".
var aptGet = regexp.MustCompile(`^Get:\d+ \S+ \S+ (\S+) .*\[([\d.,]+) ([kMG]?B)\]$`)

// aptFetched ends an apt run's downloads: "Fetched 313 MB in 1s (210 MB/s)".
var aptFetched = regexp.MustCompile(`^Fetched ([\d.,]+ [kMG]?B) in (\S+)`)

// maxLine is the longest line shown on the terminal.
const maxLine = 240

func (p *progress) line(l string) {
	l = strings.TrimRight(l, "\r")
	switch {
	case strings.HasPrefix(l, "I: "):
		msg := strings.TrimPrefix(l, "I: ")
		// The hooks' own lines name our scratch paths; the stage is enough.
		if strings.HasPrefix(msg, "running ") && strings.Contains(msg, "hook") {
			if head, rest, ok := strings.Cut(msg, ": "); ok {
				// "running special hook: sync-out /var/... /work/..."
				// keeps "sync-out"; a shell hook keeps nothing more.
				msg = head
				if f := strings.Fields(rest); len(f) > 0 && !strings.Contains(head, "shell") {
					msg += ": " + f[0]
				}
			}
		}
		p.log("      %s", msg)
	case strings.HasPrefix(l, "E: ") || strings.HasPrefix(l, "W: "):
		// A failed dpkg run is named with its whole argument list; the log
		// file keeps it.
		if len(l) > maxLine {
			l = l[:maxLine] + " ... (the rest in the log)"
		}
		p.log("      %s", l)
	default:
		if m := aptGet.FindStringSubmatch(l); m != nil {
			p.fetching = true
			p.pkgs++
			p.bytes += parseSize(m[2], m[3])
			if t := p.now(); t.Sub(p.last) >= 3*time.Second {
				p.last = t
				p.log("      downloading: %d files, %s", p.pkgs, humanBytes(p.bytes))
			}
		} else if m := aptFetched.FindStringSubmatch(l); m != nil && p.fetching {
			// apt prints its summary twice in some runs: the first counts.
			p.log("      downloaded %d files, %s in %s", p.pkgs, m[1], m[2])
			p.pkgs, p.bytes, p.fetching = 0, 0, false
		}
	}
}

// finish reports a download that ended without apt's summary line.
func (p *progress) finish() {
	if p.fetching {
		p.log("      downloaded %d files, %s", p.pkgs, humanBytes(p.bytes))
	}
}

// parseSize reads apt's "2757 kB" (decimal units, a comma as the thousands
// separator in some locales' output).
func parseSize(n, unit string) int64 {
	f, err := strconv.ParseFloat(strings.ReplaceAll(n, ",", ""), 64)
	if err != nil {
		return 0
	}
	switch unit {
	case "kB":
		f *= 1e3
	case "MB":
		f *= 1e6
	case "GB":
		f *= 1e9
	}
	return int64(f)
}

func humanBytes(n int64) string {
	switch {
	case n >= 1e9:
		return strconv.FormatFloat(float64(n)/1e9, 'f', 2, 64) + " GB"
	case n >= 1e6:
		return strconv.FormatFloat(float64(n)/1e6, 'f', 1, 64) + " MB"
	case n >= 1e3:
		return strconv.FormatFloat(float64(n)/1e3, 'f', 0, 64) + " kB"
	}
	return strconv.FormatInt(n, 10) + " B"
}
