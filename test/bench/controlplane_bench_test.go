package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"text/tabwriter"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"

	"github.com/invisible-dots/invisible-dots/internal/home"
)

// Environment of the benchmark (not of the server, which gets none of it).
const (
	// envBinary names the invisible-dots binary; `make bench` builds
	// bin/invisible-dots and passes it.
	envBinary = "INVISIBLE_DOTS_BIN"
	// envDots scales the run (default 1000 Dots and 1000 cycles); a small
	// number makes a quick trial run.
	envDots = "BENCH_DOTS"
	// envSkipCompaction=1 skips the wait of about five minutes for kine's
	// first compaction.
	envSkipCompaction = "BENCH_SKIP_COMPACTION"
	// envWaitingMinutes is how long the Computers that no host can take
	// (the bench's home registers no image) are watched for churn: the
	// figures at 1 minute and at this many (default 10).
	envWaitingMinutes = "BENCH_WAITING_MINUTES"
	// envKeep=1 keeps the home and the server's log after a run that passed
	// (a failed run always keeps them).
	envKeep = "BENCH_KEEP"
)

const (
	// watchCount Dots are created with a watch open.
	watchCount = 200
	// settle is the pause before memory is read, so start-up work and the
	// reconciler's queue have drained.
	settle = 10 * time.Second
	// afterBurst is the pause before the Dots' memory is read "minutes
	// later": that reading follows the watch's burst of creates (at once
	// when the waiting phases outlast kine's first compactions, the default),
	// and the server gives a burst's heap back only once no collection came
	// for 10 s (internal/memlimit's idleGap), after the burst's Computers are
	// made. Read at once, the burst's peak was taken for growth (455 MiB;
	// 291 MiB 15 s later, 297 a minute later).
	afterBurst = 30 * time.Second
	// idleLater is the pause after the idle reading before the second.
	idleLater = 50 * time.Second
	// startTimeout bounds a start, cold or warm.
	startTimeout = 3 * time.Minute
	// stopTimeout bounds the clean stop before the server is killed.
	stopTimeout = 2 * time.Minute
	// stopSoonRuns is how many starts stop/soon-after-ready stops.
	stopSoonRuns = 5
	// drainTimeout bounds the wait for deleted Dots and their Computers to be
	// gone, or for every Dot's Computer to exist (measured at 3.5 minutes for
	// 1000 Dots on a busy 2-core machine).
	drainTimeout = 10 * time.Minute
	// The apiserver-side kine compacts every kineCompactInterval, first one
	// interval after it starts (internal/apiserver/kine.go), to the revision
	// it found at the previous tick; compactionSlack is the margin on top.
	kineCompactInterval = 5 * time.Minute
	compactionSlack     = 90 * time.Second

	benchNS = "bench"
	cycleNS = "bench-cycle"
	watchNS = "bench-watch"
	// cyclePattern matches the keys of the cycle namespace's Dots and
	// Computers in kine.
	cyclePattern = "/registry/dots.invisible.dev/%/" + cycleNS + "/%"
	benchPattern = "/registry/dots.invisible.dev/%/" + benchNS + "/%"
)

// BenchmarkControlPlane runs invisible-dots server on a fresh home and
// measures, in order: a cold start; idle memory; 1000 create/patch/delete
// cycles and the database after them; the clean stop; a warm start on the
// same home; idle memory; 1000 Dots created and patched; their Computers;
// memory with them; create-to-watch-event latency; and, about five minutes
// after the warm start, the database after kine's first compaction. Each
// phase is a sub-benchmark reporting its figures; a table of them all is
// printed at the end. Run it once: -benchtime=1x.
func BenchmarkControlPlane(b *testing.B) {
	bin := os.Getenv(envBinary)
	if bin == "" {
		bin = filepath.Join("..", "..", "bin", "invisible-dots")
	}
	if _, err := os.Stat(bin); err != nil {
		b.Fatalf("no invisible-dots binary at %s (%v): run `make bench`, or `make build` first, or set %s", bin, err, envBinary)
	}
	n := 1000
	if v := os.Getenv(envDots); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			b.Fatalf("%s=%q is not a positive number of Dots", envDots, v)
		}
	}
	waitingMinutes := 10
	if v := os.Getenv(envWaitingMinutes); v != "" {
		var err error
		if waitingMinutes, err = strconv.Atoi(v); err != nil || waitingMinutes < 2 {
			b.Fatalf("%s=%q is not a number of minutes of at least 2 (the first look is at 1)", envWaitingMinutes, v)
		}
	}
	root, err := os.MkdirTemp("", "idbench-")
	if err != nil {
		b.Fatal(err)
	}
	h, err := home.New(filepath.Join(root, "home"))
	if err != nil {
		b.Fatal(err)
	}
	addr, err := freeAddress()
	if err != nil {
		b.Fatal(err)
	}
	logPath := filepath.Join(root, "server.log")
	ctx := context.Background()
	rep := &report{dots: n, began: time.Now(), loadBefore: loadAverage()}

	var (
		srv              *server
		client           dynamic.Interface
		warmStarted      time.Time
		afterCycles      dbStats
		compactAtWarm    int64
		createsBegan     time.Time
		createsEnded     time.Time
		computersMade    <-chan time.Time
		waitingAt1       dbStats
		keepServerLogDir = os.Getenv(envKeep) == "1"
	)
	defer func() {
		if srv != nil {
			select {
			case <-srv.exited:
			default:
				_, _ = srv.stop(stopTimeout)
			}
		}
		if keepServerLogDir || b.Failed() {
			b.Logf("the home and the server log are kept in %s", root)
			return
		}
		_ = os.RemoveAll(root)
	}()

	start := func(kind string) ([]metric, error) {
		var err error
		srv, err = startServer(bin, h, addr, logPath)
		if err != nil {
			return nil, err
		}
		r, err := srv.waitReady(ctx, startTimeout)
		if err != nil {
			return nil, err
		}
		client, err = srv.client()
		if err != nil {
			return nil, err
		}
		rep.add(kind+" start: /readyz 200 after exec", fmt.Sprintf("%.0f ms", ms(r.API)), "")
		rep.add(kind+" start: Dots listable (kubeconfig written)", fmt.Sprintf("%.0f ms", ms(r.Dots)), "")
		return []metric{{ms(r.API), "api-ready-ms"}, {ms(r.Dots), "dots-ready-ms"}}, nil
	}
	stop := func(kind string) ([]metric, error) {
		took, err := srv.stop(stopTimeout)
		if err != nil {
			return nil, err
		}
		rep.add(kind+" server: clean stop (SIGINT to exit)", fmt.Sprintf("%.0f ms", ms(took)), "")
		return []metric{{ms(took), "stop-ms"}}, nil
	}
	mem := func(label string, pause time.Duration) ([]metric, error) {
		time.Sleep(pause)
		self, kids, names, err := treeMemory(srv.pid())
		if err != nil {
			return nil, err
		}
		// After the figures: the profile's GC would change them.
		if err := srv.heapProfile(ctx, "heap "+label); err != nil {
			return nil, err
		}
		rep.add("memory "+label+": server VmRSS", fmt.Sprintf("%.1f MiB", mib(self.RSS)), "")
		rep.add("memory "+label+": postgres RSS (sum) / PSS (sum)",
			fmt.Sprintf("%.1f / %.1f MiB in %d processes", mib(kids.RSS), mib(kids.PSS), kids.Processes), "")
		if others := otherThan(names, "postgres"); others != "" {
			rep.add("memory "+label+": children not named postgres", others, "")
		}
		return []metric{
			{mib(self.RSS), "server-rss-MiB"}, {mib(self.PSS), "server-pss-MiB"},
			{mib(kids.RSS), "postgres-rss-MiB"}, {mib(kids.PSS), "postgres-pss-MiB"},
			{float64(kids.Processes), "postgres-procs"},
		}, nil
	}

	phases := []struct {
		name string
		run  func() ([]metric, error)
	}{
		{"start/cold", func() ([]metric, error) { return start("cold") }},
		{"memory/idle-cold", func() ([]metric, error) { return mem("idle after cold start", settle) }},
		{"db/cycles", func() ([]metric, error) {
			before, err := readDB(ctx, h, cyclePattern)
			if err != nil {
				return nil, err
			}
			if err := createNamespace(ctx, client, cycleNS); err != nil {
				return nil, err
			}
			began := time.Now()
			for i := range n {
				name := fmt.Sprintf("cycle-%04d", i)
				dots := client.Resource(dotsGVR).Namespace(cycleNS)
				if _, err := dots.Create(ctx, newDot(cycleNS, name), metav1.CreateOptions{}); err != nil {
					return nil, fmt.Errorf("cycle %d: create Dot %s: %w", i, name, err)
				}
				if _, err := dots.Patch(ctx, name, types.MergePatchType, instructionsPatch(i), metav1.PatchOptions{}); err != nil {
					return nil, fmt.Errorf("cycle %d: patch Dot %s: %w", i, name, err)
				}
				if err := dots.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
					return nil, fmt.Errorf("cycle %d: delete Dot %s: %w", i, name, err)
				}
			}
			requests := time.Since(began)
			if err := waitCount(ctx, client, cycleNS, 0, 0); err != nil {
				return nil, err
			}
			drained := time.Since(began)
			afterCycles, err = readDB(ctx, h, cyclePattern)
			if err != nil {
				return nil, err
			}
			rep.add(fmt.Sprintf("%d create/patch/delete cycles: requests, then all gone", n),
				fmt.Sprintf("%.1f s, %.1f s", requests.Seconds(), drained.Seconds()), "")
			rep.add("database before the cycles (pg_database_size; kine table)", sizes(before), "")
			rep.add("database after the cycles", sizes(afterCycles), "")
			rep.add("kine rows after the cycles (all; of the cycle namespace)",
				fmt.Sprintf("%d; %d (revision %d)", afterCycles.Rows, afterCycles.Matching, afterCycles.Revision), "")
			return []metric{
				{requests.Seconds(), "requests-s"}, {drained.Seconds(), "drained-s"},
				{mib(before.Database), "db-before-MiB"}, {mib(afterCycles.Database), "db-after-MiB"},
				{mib(afterCycles.Kine), "kine-after-MiB"}, {float64(afterCycles.Rows), "kine-rows"},
				{float64(afterCycles.Matching), "cycle-rows"},
			}, nil
		}},
		{"stop/cold", func() ([]metric, error) { return stop("cold") }},
		{"stop/soon-after-ready", func() ([]metric, error) {
			// A stop soon after a start is what every test and check that
			// starts a server pays: SIGTERM 2 s after /readyz, 5 times.
			var took []float64
			for range stopSoonRuns {
				var err error
				if srv, err = startServer(bin, h, addr, logPath); err != nil {
					return nil, err
				}
				if _, err := srv.waitReady(ctx, startTimeout); err != nil {
					return nil, err
				}
				time.Sleep(2 * time.Second)
				d, err := srv.stopWith(syscall.SIGTERM, stopTimeout)
				if err != nil {
					return nil, err
				}
				took = append(took, ms(d))
			}
			slices.Sort(took)
			median, worst := took[len(took)/2], took[len(took)-1]
			rep.add(fmt.Sprintf("stop 2 s after /readyz (SIGTERM to exit; median, worst of %d)", stopSoonRuns),
				fmt.Sprintf("%.0f ms, %.0f ms", median, worst), "")
			return []metric{{median, "stop-median-ms"}, {worst, "stop-worst-ms"}}, nil
		}},
		{"start/warm", func() ([]metric, error) {
			// The kubeconfig is written anew once the CRDs are established:
			// removing the old one makes its appearance the signal again.
			if err := os.Remove(h.Kubeconfig()); err != nil {
				return nil, fmt.Errorf("remove the old kubeconfig: %w", err)
			}
			warmStarted = time.Now()
			m, err := start("warm")
			if err != nil {
				return nil, err
			}
			s, err := readDB(ctx, h, cyclePattern)
			if err != nil {
				return nil, err
			}
			compactAtWarm = s.CompactRevision
			return m, nil
		}},
		{"memory/idle", func() ([]metric, error) { return mem("idle after warm start", settle) }},
		// The server gives back what its start took 5 s after ready
		// (memlimit.ReleaseStartAfter); then the code its idle work runs is
		// read back into memory over the next minute: a reading well after
		// that, the server as it idles from then on.
		{"memory/idle-later", func() ([]metric, error) { return mem("idle a minute after warm start", idleLater) }},
		{"dots/create", func() ([]metric, error) {
			if err := createNamespace(ctx, client, benchNS); err != nil {
				return nil, err
			}
			dots := client.Resource(dotsGVR).Namespace(benchNS)
			// A watch, not a list in a loop, sees the Computers come: it
			// costs the server nothing during the patch loop that follows.
			watcher, err := srv.watchClient()
			if err != nil {
				return nil, err
			}
			if computersMade, err = whenAllAdded(ctx, watcher, benchNS, n); err != nil {
				return nil, err
			}
			var lat []time.Duration
			side, err := srv.measure(ctx, "create", serverSide{Verb: "POST", Resource: "dots", StoreOp: "create", Group: dotsGVR.Group}, func() error {
				createsBegan = time.Now()
				lat = make([]time.Duration, 0, n)
				for i := range n {
					name := fmt.Sprintf("dot-%04d", i)
					t := time.Now()
					if _, err := dots.Create(ctx, newDot(benchNS, name), metav1.CreateOptions{}); err != nil {
						return fmt.Errorf("create Dot %s: %w", name, err)
					}
					lat = append(lat, time.Since(t))
				}
				createsEnded = time.Now()
				return nil
			})
			if err != nil {
				return nil, err
			}
			m := rep.latencies(fmt.Sprintf("create %d Dots one after another", n), "", lat)
			return append(m, rep.serverSide(fmt.Sprintf("create %d Dots", n), side)...), nil
		}},
		{"dots/patch", func() ([]metric, error) {
			dots := client.Resource(dotsGVR).Namespace(benchNS)
			lat := make([]time.Duration, 0, n)
			side, err := srv.measure(ctx, "patch", serverSide{Verb: "PATCH", Resource: "dots", StoreOp: "update", Group: dotsGVR.Group}, func() error {
				for i := range n {
					name := fmt.Sprintf("dot-%04d", i)
					t := time.Now()
					if _, err := dots.Patch(ctx, name, types.MergePatchType, instructionsPatch(i), metav1.PatchOptions{}); err != nil {
						return fmt.Errorf("patch Dot %s: %w", name, err)
					}
					lat = append(lat, time.Since(t))
				}
				return nil
			})
			if err != nil {
				return nil, err
			}
			m := rep.latencies(fmt.Sprintf("merge-patch %d Dots one after another", n), "", lat)
			return append(m, rep.serverSide(fmt.Sprintf("merge-patch %d Dots", n), side)...), nil
		}},
		{"dots/computers", func() ([]metric, error) {
			if err := waitCount(ctx, client, benchNS, n, n); err != nil {
				return nil, err
			}
			var made time.Time
			select {
			case made = <-computersMade:
			case <-time.After(drainTimeout):
				return nil, fmt.Errorf("the watch of Computers saw fewer than %d added within %s", n, drainTimeout)
			}
			all, lag := made.Sub(createsBegan), max(made.Sub(createsEnded), 0)
			rep.add(fmt.Sprintf("every one of %d Dots has its Computer: from the first create, from the last", n),
				fmt.Sprintf("%.1f s, %.1f s", all.Seconds(), lag.Seconds()), "")
			return []metric{{all.Seconds(), "all-computers-s"}, {lag.Seconds(), "after-last-create-s"}}, nil
		}},
		{"memory/with-dots", func() ([]metric, error) {
			return mem(fmt.Sprintf("with %d Dots and Computers", n), settle)
		}},
		// No image is registered in the bench's home, so no host can take
		// the Computers: each waits PROVISIONING with one condition and one
		// Event. Waiting must cost nothing: the database and the server's
		// memory stay flat.
		{"waiting/1min", func() ([]metric, error) {
			time.Sleep(time.Until(createsBegan.Add(time.Minute)))
			var err error
			if waitingAt1, err = readDB(ctx, h, benchPattern); err != nil {
				return nil, err
			}
			m, err := mem(fmt.Sprintf("%d Computers no host can take, 1 min after the first create", n), 0)
			rep.add("waiting Computers, 1 min: database; kine revision", fmt.Sprintf("%s; %d", sizes(waitingAt1), waitingAt1.Revision), "")
			return append(m, metric{mib(waitingAt1.Database), "db-MiB"}, metric{float64(waitingAt1.Revision), "revision"}), err
		}},
		{"waiting/later", func() ([]metric, error) {
			time.Sleep(time.Until(createsBegan.Add(time.Duration(waitingMinutes) * time.Minute)))
			later, err := readDB(ctx, h, benchPattern)
			if err != nil {
				return nil, err
			}
			m, err := mem(fmt.Sprintf("%d Computers no host can take, %d min after the first create", n, waitingMinutes), 0)
			minutes := float64(waitingMinutes - 1)
			writes := float64(later.Revision-waitingAt1.Revision) / minutes
			// Nothing else runs between the two looks. The host's Lease
			// (every 10 s) and the leader Lease (every 2 s) are renewed
			// whatever the Computers do: 36 writes a minute.
			rep.add(fmt.Sprintf("waiting Computers, %d min: database; kine revision", waitingMinutes), fmt.Sprintf("%s; %d", sizes(later), later.Revision), "flat")
			rep.add("waiting Computers: writes a minute between the two looks (Lease renewals alone: 36)", fmt.Sprintf("%.0f", writes), "36")
			return append(m, metric{mib(later.Database), "db-MiB"}, metric{writes, "writes-per-min"}), err
		}},
		{"watch", func() ([]metric, error) { return watchLatency(ctx, client, rep) }},
		{"db/compacted", func() ([]metric, error) {
			if os.Getenv(envSkipCompaction) == "1" {
				rep.add("database after kine's compaction", "not measured ("+envSkipCompaction+"=1)", "")
				return nil, nil
			}
			deadline := warmStarted.Add(kineCompactInterval + compactionSlack)
			firstLook := time.Since(warmStarted)
			var s dbStats
			compacted := false
			for {
				var err error
				if s, err = readDB(ctx, h, cyclePattern); err != nil {
					return nil, err
				}
				if compacted = s.CompactRevision > compactAtWarm; compacted || time.Now().After(deadline) {
					break
				}
				time.Sleep(2 * time.Second)
			}
			after := time.Since(warmStarted)
			if !compacted {
				keepServerLogDir = true
				rep.add("database after kine's compaction",
					fmt.Sprintf("NO compaction seen %.0f s after the warm start (compact revision still %d)", after.Seconds(), s.CompactRevision), "")
				b.Logf("kine did not compact within %s of the warm start", after.Round(time.Second))
				return []metric{{0, "compacted"}}, nil
			}
			seen := fmt.Sprintf("seen %.0f s after the warm start", after.Seconds())
			if after-firstLook < 2*time.Second {
				seen = fmt.Sprintf("already done at the first look, %.0f s after the warm start", after.Seconds())
			}
			rep.add("kine's first compaction (interval 5 min)", fmt.Sprintf("%s; to revision %d of %d", seen, s.CompactRevision, s.Revision), "")
			rep.add("database after the compaction", sizes(s), "")
			rep.add("kine rows after the compaction (all; of the cycle namespace; dead, not yet vacuumed)",
				fmt.Sprintf("%d; %d; %d", s.Rows, s.Matching, s.DeadRows), "")
			return []metric{
				{1, "compacted"}, {after.Seconds(), "after-warm-start-s"},
				{mib(s.Database), "db-MiB"}, {mib(s.Kine), "kine-MiB"},
				{float64(s.Rows), "kine-rows"}, {float64(s.Matching), "cycle-rows"}, {float64(s.DeadRows), "dead-rows"},
			}, nil
		}},
		{"memory/with-dots-later", func() ([]metric, error) {
			// The burst's peak is shown, beside the figure at rest.
			peak, _, _, err := treeMemory(srv.pid())
			if err != nil {
				return nil, err
			}
			rep.add(fmt.Sprintf("memory right after the watch's %d creates: server PSS", watchCount), fmt.Sprintf("%.1f MiB", mib(peak.PSS)), "")
			m, err := mem(fmt.Sprintf("with %d Dots, minutes later (%s after the watch's creates)", n, afterBurst), afterBurst)
			return append(m, metric{mib(peak.PSS), "burst-server-pss-MiB"}), err
		}},
		{"stop/warm", func() ([]metric, error) { return stop("warm") }},
	}

	for _, p := range phases {
		var (
			done    bool
			metrics []metric
			err     error
		)
		ok := b.Run(p.name, func(b *testing.B) {
			// A phase runs once whatever b.N is; a second call (without
			// -benchtime=1x) only reports again.
			if !done {
				metrics, err = p.run()
				done = true
			}
			if err != nil {
				if srv != nil {
					b.Log(sessions(ctx, h))
				}
				b.Fatal(err)
			}
			b.ReportMetric(0, "ns/op")
			for _, m := range metrics {
				b.ReportMetric(m.value, m.unit)
			}
		})
		if !ok {
			break
		}
	}
	rep.print()
}

// watchLatency opens a watch on an empty namespace, creates watchCount Dots
// in it one after another, and measures from the start of each create, and
// from its return, to the ADDED event that carries it.
func watchLatency(ctx context.Context, client dynamic.Interface, rep *report) ([]metric, error) {
	if err := createNamespace(ctx, client, watchNS); err != nil {
		return nil, err
	}
	dots := client.Resource(dotsGVR).Namespace(watchNS)
	list, err := dots.List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list Dots in %s: %w", watchNS, err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := dots.Watch(wctx, metav1.ListOptions{ResourceVersion: list.GetResourceVersion()})
	if err != nil {
		return nil, fmt.Errorf("watch Dots in %s: %w", watchNS, err)
	}
	defer w.Stop()
	var (
		mu    sync.Mutex
		added = map[string]time.Time{}
		all   = make(chan struct{})
		// ended is closed when the server ends the watch before all came:
		// under load its watch cache closes a watcher that falls behind,
		// which a client (an informer) answers by watching again. The
		// bench says so instead of counting what never comes.
		ended  = make(chan struct{})
		status string
	)
	go func() {
		defer close(ended)
		for ev := range w.ResultChan() {
			at := time.Now()
			if ev.Type == watch.Error {
				mu.Lock()
				status = fmt.Sprintf("%v", apierrors.FromObject(ev.Object))
				mu.Unlock()
				continue
			}
			if ev.Type != watch.Added {
				continue
			}
			u, ok := ev.Object.(*unstructured.Unstructured)
			if !ok {
				continue
			}
			mu.Lock()
			added[u.GetName()] = at
			if len(added) == watchCount {
				close(all)
			}
			mu.Unlock()
		}
	}()
	starts := make([]time.Time, watchCount)
	returns := make([]time.Time, watchCount)
	for i := range watchCount {
		name := fmt.Sprintf("watched-%04d", i)
		starts[i] = time.Now()
		if _, err := dots.Create(ctx, newDot(watchNS, name), metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("create Dot %s: %w", name, err)
		}
		returns[i] = time.Now()
	}
	select {
	case <-all:
	case <-ended:
		mu.Lock()
		got, why := len(added), status
		mu.Unlock()
		if got < watchCount {
			if why == "" {
				why = "no error event: the connection closed"
			}
			return nil, fmt.Errorf("the server ended the watch after %d of %d ADDED events (%s)", got, watchCount, why)
		}
	case <-time.After(time.Minute):
		mu.Lock()
		got := len(added)
		mu.Unlock()
		return nil, fmt.Errorf("the watch delivered %d of %d ADDED events within a minute of the last create", got, watchCount)
	}
	mu.Lock()
	defer mu.Unlock()
	fromStart := make([]time.Duration, 0, watchCount)
	fromReturn := make([]time.Duration, 0, watchCount)
	early := 0
	for i := range watchCount {
		at := added[fmt.Sprintf("watched-%04d", i)]
		fromStart = append(fromStart, at.Sub(starts[i]))
		d := at.Sub(returns[i])
		if d < 0 {
			early++ // the event arrived before the create's response
			d = 0
		}
		fromReturn = append(fromReturn, d)
	}
	m := rep.latencies(fmt.Sprintf("create-to-ADDED event, from create start (%d Dots)", watchCount), "", fromStart)
	m2 := rep.latencies("create-to-ADDED event, from create return (0 if before)", "", fromReturn)
	rep.add("ADDED events that arrived before their create returned", fmt.Sprintf("%d of %d", early, watchCount), "")
	for i := range m2 {
		m2[i].unit = "after-return-" + m2[i].unit
	}
	return append(m, m2...), nil
}

// newDot is a valid Dot with what a person would write at the least.
func newDot(ns, name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "dots.invisible.dev/v1alpha1",
		"kind":       "Dot",
		"metadata":   map[string]any{"name": name, "namespace": ns},
		"spec": map[string]any{
			"instructions": "Keep an eye on the benchmark.",
			"model":        map[string]any{"provider": "openrouter", "id": "z-ai/glm-5.3-flash"},
			"computer":     map[string]any{"cpu": int64(2), "memory": "4Gi", "disk": "40Gi"},
		},
	}}
}

func instructionsPatch(i int) []byte {
	return fmt.Appendf(nil, `{"spec":{"instructions":"Patched %d times over."}}`, i)
}

func createNamespace(ctx context.Context, client dynamic.Interface, name string) error {
	ns := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": name},
	}}
	if _, err := client.Resource(namespacesGVR).Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create namespace %s: %w", name, err)
	}
	return nil
}

// waitCount waits until namespace ns holds exactly dots Dots and computers
// Computers.
// whenAllAdded watches the Computers of ns and sends the time the n-th was
// added, then stops watching.
func whenAllAdded(ctx context.Context, client dynamic.Interface, ns string, n int) (<-chan time.Time, error) {
	w, err := client.Resource(computersGVR).Namespace(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("watch Computers in %s: %w", ns, err)
	}
	done := make(chan time.Time, 1)
	go func() {
		defer w.Stop()
		added := 0
		for ev := range w.ResultChan() {
			if ev.Type == watch.Added {
				if added++; added == n {
					done <- time.Now()
					return
				}
			}
		}
	}()
	return done, nil
}

func waitCount(ctx context.Context, client dynamic.Interface, ns string, dots, computers int) error {
	deadline := time.Now().Add(drainTimeout)
	for {
		d, err := client.Resource(dotsGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("list Dots in %s: %w", ns, err)
		}
		c, err := client.Resource(computersGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("list Computers in %s: %w", ns, err)
		}
		if len(d.Items) == dots && len(c.Items) == computers {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("namespace %s still holds %d Dots and %d Computers after %s, not %d and %d",
				ns, len(d.Items), len(c.Items), drainTimeout, dots, computers)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

type metric struct {
	value float64
	unit  string
}

// report collects the figures for the table printed at the end.
type report struct {
	dots       int
	began      time.Time
	loadBefore string
	rows       [][3]string
}

func (r *report) add(figure, value, target string) {
	r.rows = append(r.rows, [3]string{figure, value, target})
}

// latencies adds a p50/p99 row and returns the metrics.
func (r *report) latencies(figure, target string, ds []time.Duration) []metric {
	p50, p99 := percentile(ds, 50), percentile(ds, 99)
	r.add(figure+": p50 / p99 / max",
		fmt.Sprintf("%.1f / %.1f / %.1f ms", ms(p50), ms(p99), ms(percentile(ds, 100))), target)
	return []metric{{ms(p50), "p50-ms"}, {ms(p99), "p99-ms"}}
}

// serverSide adds the API server's own p99 of a load's requests and of
// their store operations (from its histograms, so to a bucket's precision).
func (r *report) serverSide(load string, m measured) []metric {
	req, store := 1000*m.Request.quantile(0.99), 1000*m.Store.quantile(0.99)
	r.add(load+": server-side p99, request / store (API server histograms)",
		fmt.Sprintf("%.1f / %.1f ms (%.0f / %.0f observed)", req, store, m.Request.count, m.Store.count), "")
	// Every write the load caused, the controllers' beside its own: what
	// the store's time is shared with.
	r.add(load+": the API server's writes meanwhile", m.writesLine(m.Request.count), "")
	return []metric{{req, "server-p99-ms"}, {store, "store-p99-ms"}}
}

func (r *report) print() {
	var sb strings.Builder
	fmt.Fprintf(&sb, "\ninvisible-dots control plane, %d Dots; %d CPUs; load average %s before, %s after; %s in all\n\n",
		r.dots, runtime.NumCPU(), r.loadBefore, loadAverage(), time.Since(r.began).Round(time.Second))
	tw := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', 0)
	// The goals are in one place, the table `make bench` ends with
	// (test/bench/figures); this column holds only what a figure is
	// expected to be beside the others.
	fmt.Fprintln(tw, "figure\tmeasured\texpected")
	for _, row := range r.rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", row[0], row[1], row[2])
	}
	_ = tw.Flush()
	fmt.Fprintln(os.Stdout, sb.String())
}

func sizes(s dbStats) string {
	return fmt.Sprintf("%.1f MiB; %.1f MiB", mib(s.Database), mib(s.Kine))
}

// otherThan lists the names in counts other than want, "name×count".
func otherThan(counts map[string]int, want string) string {
	var out []string
	for name, c := range counts {
		if name != want {
			out = append(out, fmt.Sprintf("%s×%d", name, c))
		}
	}
	return strings.Join(out, ", ")
}

// loadAverage is the 1, 5 and 15 minute load averages: the machine may be
// shared, and the figures mean little without it.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
