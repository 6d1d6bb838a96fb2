// Command figures reads the output of `make bench`'s go test runs and prints
// one table of the figures that have a goal, each with its goal and whether
// it was met, so the next reader sees at once what holds and what does not.
// Figures without a goal stay in the runs' own output above it.
//
//	go run ./test/bench/figures < _output/bench/figures.txt
//
// A figure is a benchmark's reported metric: the line
// "BenchmarkControlPlane/dots/create-2  1  12.3 p50-ms  19.8 p99-ms" gives
// ControlPlane/dots/create's p50-ms and p99-ms. A goal whose benchmark did
// not run shows "not run", one whose benchmark ran without that figure "not
// reported": a missing figure is said, not skipped. A benchmark or package
// that failed is listed after the table and makes the command fail: `make
// bench` goes on past a failed step to measure the rest, and ends with this.
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"text/tabwriter"
)

// goal is one row of the table: which figure, in words, and its bound.
type goal struct {
	What  string
	Bench string // benchmark name without "Benchmark" and the -N suffix
	Unit  string
	// AtMost is an upper bound; AtLeast (when set) a lower one instead.
	AtMost, AtLeast float64
}

// goals are the targets of `make bench` (issue "Performance" and those
// before it), in the order the table prints them. One place: the Makefile
// and the note quote this table, they do not restate it.
var goals = []goal{
	{What: "cold start to /readyz (ms)", Bench: "ControlPlane/start/cold", Unit: "api-ready-ms", AtMost: 2000},
	{What: "warm start to /readyz (ms)", Bench: "ControlPlane/start/warm", Unit: "api-ready-ms", AtMost: 1000},
	{What: "Ctrl-C: stop 2 s after /readyz, median (ms)", Bench: "ControlPlane/stop/soon-after-ready", Unit: "stop-median-ms", AtMost: 5000},
	{What: "idle server PSS (MiB)", Bench: "ControlPlane/memory/idle", Unit: "server-pss-MiB", AtMost: 120},
	{What: "idle PostgreSQL PSS (MiB)", Bench: "ControlPlane/memory/idle", Unit: "postgres-pss-MiB", AtMost: 60},
	{What: "idle server PSS, a minute after the warm start (MiB)", Bench: "ControlPlane/memory/idle-later", Unit: "server-pss-MiB", AtMost: 120},
	{What: "create p99, Dots one after another (ms)", Bench: "ControlPlane/dots/create", Unit: "p99-ms", AtMost: 20},
	{What: "merge-patch p99, Dots one after another (ms)", Bench: "ControlPlane/dots/patch", Unit: "p99-ms", AtMost: 20},
	{What: "every Computer made, after the last Dot's create (s)", Bench: "ControlPlane/dots/computers", Unit: "after-last-create-s", AtMost: 10},
	{What: "server PSS with the Dots and Computers (MiB)", Bench: "ControlPlane/memory/with-dots", Unit: "server-pss-MiB", AtMost: 350},
	{What: "server PSS with the Dots, minutes later (MiB)", Bench: "ControlPlane/memory/with-dots-later", Unit: "server-pss-MiB", AtMost: 350},
	{What: "create-to-watch-event p99, from create start (ms)", Bench: "ControlPlane/watch", Unit: "p99-ms", AtMost: 25},
	{What: "kine on PostgreSQL ÷ etcd, create p99", Bench: "StoreBesideEtcd/ratio", Unit: "create-p99-x", AtMost: 1.2},
	{What: "kine on PostgreSQL ÷ etcd, patch p99", Bench: "StoreBesideEtcd/ratio", Unit: "patch-p99-x", AtMost: 1.2},
	{What: "kine on PostgreSQL ÷ etcd, create-to-ADDED p99", Bench: "StoreBesideEtcd/ratio", Unit: "added-p99-x", AtMost: 1.2},
	{What: "kine on PostgreSQL ÷ etcd, patch-to-MODIFIED p99", Bench: "StoreBesideEtcd/ratio", Unit: "modified-p99-x", AtMost: 1.2},
	{What: "Computer reconcile, a pass over 100 fake VMs (ns)", Bench: "Reconcile100Computers", Unit: "ns/op", AtMost: 3e6},
	{What: "engine turn overhead, instant model (ms)", Bench: "TurnOverhead", Unit: "ms/turn", AtMost: 3},
	{What: "engine outbox, live, 64 writers (events/s)", Bench: "OutboxLive", Unit: "events/s", AtLeast: 20000},
	{What: "engine outbox, live, one writer waiting on each (events/s)", Bench: "OutboxLiveOneWriter", Unit: "events/s"},
	{What: "event pump ingest (events/s)", Bench: "PumpIngest", Unit: "events/s", AtLeast: 5000},
	{What: "live stream, commit to 100 clients p99 (ms)", Bench: "StreamFanOut", Unit: "p99-ms", AtMost: 50},
	{What: "OpenAI endpoint, answer's commit to the client, whole p99 (ms)", Bench: "OpenAIChat", Unit: "whole-p99-ms", AtMost: 50},
	{What: "OpenAI endpoint, answer's commit to the client, streamed p99 (ms)", Bench: "OpenAIChat", Unit: "streamed-p99-ms", AtMost: 50},
	{What: "webhook accept, signed delivery to 202 at 100/s, p99 (ms)", Bench: "WebhookAccept", Unit: "p99-ms", AtMost: 100},
	{What: "warm chat round trip p99, tcg, stand-in model (ms)", Bench: "DotChat", Unit: "chat-p99-ms"},
	{What: "… of it: to the guest (deliver) p50 (ms)", Bench: "DotChat", Unit: "deliver-p50-ms"},
	{What: "… the engine's turn start under tcg p50 (ms)", Bench: "DotChat", Unit: "to-model-p50-ms"},
	{What: "… the model's answer back into the log p50 (ms)", Bench: "DotChat", Unit: "back-p50-ms"},
	{What: "… the guest taking the message under tcg (the send to its answer) p50 (ms)", Bench: "DotChat", Unit: "take-p50-ms"},
	{What: "the round trip less the model and the turn's start, p99 (ms; the guest's take and commit under tcg in)", Bench: "DotChat", Unit: "overhead-p99-ms"},
	{What: "our own overhead in a warm chat, p99 (ms; the same less the guest's take, message by message)", Bench: "DotChat", Unit: "overhead-less-take-p99-ms", AtMost: 100},
	{What: "a sleeping Dot's answer ÷ the image's boot", Bench: "DotChat", Unit: "wake-answer/boot", AtMost: 1.1},
	{What: "Telegram: the hub's own part of a chat, p99 (ms)", Bench: "TelegramChat", Unit: "hub-p99-ms", AtMost: 100},
}

var (
	benchLine = regexp.MustCompile(`^Benchmark(\S+?)(-\d+)?\s+\d+\s+(.*)$`)
	// failLine is go test's line for a failed benchmark or test ("--- FAIL:
	// BenchmarkX/y") or package ("FAIL\tpkg\t12.3s").
	failLine = regexp.MustCompile(`^(?:--- FAIL: (\S+)|FAIL\s+(\S+)\s)`)
)

// parse reads go test -bench output: benchmark -> unit -> value. A later
// line of the same benchmark and unit wins. failed are the benchmarks and
// packages that failed, in order.
func parse(r io.Reader) (out map[string]map[string]float64, failed []string, err error) {
	out = map[string]map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if f := failLine.FindStringSubmatch(line + " "); f != nil {
			failed = append(failed, f[1]+f[2])
			continue
		}
		m := benchLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		fields := strings.Fields(m[3])
		for i := 0; i+1 < len(fields); i += 2 {
			v, err := strconv.ParseFloat(fields[i], 64)
			if err != nil {
				break
			}
			if out[m[1]] == nil {
				out[m[1]] = map[string]float64{}
			}
			out[m[1]][fields[i+1]] = v
		}
	}
	return out, failed, sc.Err()
}

// table writes the goals' rows with what was measured.
func table(w io.Writer, figures map[string]map[string]float64) (met, missed, notRun int) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "figure\tmeasured\tgoal\tmet")
	for _, g := range goals {
		v, ok := figures[g.Bench][g.Unit]
		bound, verdict := "—", "—"
		switch {
		case g.AtLeast > 0:
			bound = "≥ " + strconv.FormatFloat(g.AtLeast, 'f', -1, 64)
		case g.AtMost > 0:
			bound = "≤ " + strconv.FormatFloat(g.AtMost, 'f', -1, 64)
		}
		measured := "not run"
		if _, ran := figures[g.Bench]; ran && !ok {
			measured = "not reported"
		}
		if ok {
			measured = num(v)
			switch {
			case g.AtLeast > 0 && v >= g.AtLeast, g.AtMost > 0 && g.AtLeast == 0 && v <= g.AtMost:
				verdict = "yes"
				met++
			case g.AtLeast > 0 || g.AtMost > 0:
				verdict = "NO"
				missed++
			}
		} else {
			notRun++
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", g.What, measured, bound, verdict)
	}
	tw.Flush()
	return met, missed, notRun
}

// num prints a figure with the precision its size deserves.
func num(v float64) string {
	switch {
	case v >= 1000:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
}

func main() {
	figures, failed, err := parse(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "figures:", err)
		os.Exit(1)
	}
	fmt.Println("\nmake bench: the figures with a goal")
	fmt.Println()
	met, missed, notRun := table(os.Stdout, figures)
	fmt.Printf("\n%d met, %d not met, %d not run\n", met, missed, notRun)
	if len(failed) > 0 {
		fmt.Printf("\nfailed (their output above says why): %s\n", strings.Join(failed, ", "))
		os.Exit(1)
	}
}
