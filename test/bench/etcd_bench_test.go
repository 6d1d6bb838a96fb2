package bench

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/invisible-dots/invisible-dots/internal/home"
)

const (
	// envEtcd names the etcd binary (default: etcd on PATH, which Debian's
	// etcd-server package installs as /usr/bin/etcd).
	envEtcd = "BENCH_ETCD"
	// envEtcdServers is the server's variable that stores its resources in
	// an external etcd (internal/cli/server.go).
	envEtcdServers = "INVISIBLE_DOTS_ETCD_SERVERS"
	// envStoreRounds is how many rounds of the two stores run (default 2):
	// a round runs the server on each store once, the second round in the
	// opposite order (kine, etcd, etcd, kine), so that a machine whose load
	// drifts weighs on both alike. The samples of every round are pooled.
	envStoreRounds = "BENCH_STORE_ROUNDS"
	// storeDots is the default number of Dots of each load (BENCH_DOTS
	// replaces it).
	storeDots = 300
	// storeGoal is the ratio kine on PostgreSQL ÷ etcd the p99s should stay
	// within.
	storeGoal = 1.2
)

// storeSamples is what the loads measured on one store, pooled over rounds.
type storeSamples struct {
	// create and patch are the client's latencies of n creates one after
	// another, then n merge patches; added and modified from each request's
	// start to the watch event that carries it (ADDED, MODIFIED with the
	// patched field), addedAfter and modifiedAfter from its return (0 when
	// the event came first).
	create, added, addedAfter      []time.Duration
	patch, modified, modifiedAfter []time.Duration
	// early counts the events that came before their request returned.
	early int
	// The API server's own figures of the loads, from its /metrics: its
	// request latency of POST and PATCH of dots, and its calls to the store.
	serverCreate, serverPatch histogram
	storeCreate, storeUpdate  histogram
	// ready is exec to Dots listable, on a fresh home.
	ready []time.Duration
	// CPU time used during the loads by the server process (API server,
	// controllers and, on its own store, kine), by its PostgreSQL, and by
	// etcd; dots is how many Dots the loads created and patched.
	serverCPU, postgresCPU, etcdCPU time.Duration
	dots                            int
}

// BenchmarkStoreBesideEtcd runs the same server on fresh homes on its own
// store (kine on PostgreSQL) and on upstream's (etcd, a throwaway single
// member), and the same loads against each, with a watch open on their
// namespace: n Dots created one after another, then each merge-patched.
// The figures are the ratios kine ÷ etcd of the p99s of the requests and of
// request-to-watch-event (goal ≤ 1.2). One server runs at a time; the
// controllers run in both, as in the product. Run it once: -benchtime=1x.
//
// Measured on a shared 2-core machine (December 2026): the ratios follow the
// machine's load, about 0.8 to 1.4 at p99 with a load average of 2 to 6 and
// 1.7 to 1.8 at 9 to 15, because kine and its PostgreSQL spend about three
// times etcd's CPU per write (the CPU table). Neither kine's poll interval
// (every writer is in process and wakes the poll at once) nor the commit's
// fsync (0.14 ms on that disk; synchronous_commit=off moved nothing
// reproducibly) nor PostgreSQL's plan cache (force_generic_plan: 9% less
// PostgreSQL CPU, no latency) is the gap.
func BenchmarkStoreBesideEtcd(b *testing.B) {
	etcdBin := os.Getenv(envEtcd)
	if etcdBin == "" {
		var err error
		if etcdBin, err = exec.LookPath("etcd"); err != nil {
			b.Skipf("no etcd binary on PATH (Debian's etcd-server package installs /usr/bin/etcd; or set %s): the comparison with upstream's store is skipped", envEtcd)
		}
	}
	bin := os.Getenv(envBinary)
	if bin == "" {
		bin = filepath.Join("..", "..", "bin", "invisible-dots")
	}
	if _, err := os.Stat(bin); err != nil {
		b.Fatalf("no invisible-dots binary at %s (%v): run `make build` first, or set %s", bin, err, envBinary)
	}
	n := positiveEnv(b, envDots, storeDots)
	rounds := positiveEnv(b, envStoreRounds, 2)
	root, err := os.MkdirTemp("", "idbench-etcd-")
	if err != nil {
		b.Fatal(err)
	}
	keep := os.Getenv(envKeep) == "1"
	defer func() {
		if keep || b.Failed() {
			b.Logf("the homes and the logs are kept in %s", root)
			return
		}
		_ = os.RemoveAll(root)
	}()
	ctx := context.Background()
	began, loadBefore := time.Now(), loadAverage()

	var kine, etcd storeSamples
	for round := 1; round <= rounds; round++ {
		order := []bool{false, true} // on etcd?
		if round%2 == 0 {
			order = []bool{true, false}
		}
		for _, onEtcd := range order {
			name, into := "kine-postgresql", &kine
			if onEtcd {
				name, into = "etcd", &etcd
			}
			var (
				done bool
				one  storeSamples
				err  error
			)
			ok := b.Run(fmt.Sprintf("round%d/%s", round, name), func(b *testing.B) {
				if !done {
					dir := filepath.Join(root, fmt.Sprintf("%d-%s", round, name))
					err = runStore(ctx, b, bin, etcdBin, dir, onEtcd, n, &one)
					done = true
				}
				if err != nil {
					b.Fatal(err)
				}
				reportStore(b, one)
			})
			if !ok {
				return
			}
			into.pool(one)
		}
	}
	b.Run("pooled/kine-postgresql", func(b *testing.B) { reportStore(b, kine) })
	b.Run("pooled/etcd", func(b *testing.B) { reportStore(b, etcd) })
	b.Run("ratio", func(b *testing.B) {
		b.ReportMetric(0, "ns/op")
		for _, r := range storeRatios(kine, etcd) {
			b.ReportMetric(r.p99, r.unit)
		}
	})
	printStoreTable(n, rounds, began, loadBefore, kine, etcd)
}

func positiveEnv(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		b.Fatalf("%s=%q is not a positive number", name, v)
	}
	return n
}

func (s *storeSamples) pool(o storeSamples) {
	s.create = append(s.create, o.create...)
	s.added = append(s.added, o.added...)
	s.addedAfter = append(s.addedAfter, o.addedAfter...)
	s.patch = append(s.patch, o.patch...)
	s.modified = append(s.modified, o.modified...)
	s.modifiedAfter = append(s.modifiedAfter, o.modifiedAfter...)
	s.early += o.early
	s.serverCreate = s.serverCreate.plus(o.serverCreate)
	s.serverPatch = s.serverPatch.plus(o.serverPatch)
	s.storeCreate = s.storeCreate.plus(o.storeCreate)
	s.storeUpdate = s.storeUpdate.plus(o.storeUpdate)
	s.ready = append(s.ready, o.ready...)
	s.serverCPU += o.serverCPU
	s.postgresCPU += o.postgresCPU
	s.etcdCPU += o.etcdCPU
	s.dots += o.dots
}

func reportStore(b *testing.B, s storeSamples) {
	b.ReportMetric(0, "ns/op")
	for _, l := range []struct {
		unit string
		ds   []time.Duration
	}{{"create", s.create}, {"added", s.added}, {"patch", s.patch}, {"modified", s.modified}} {
		b.ReportMetric(ms(percentile(l.ds, 50)), l.unit+"-p50-ms")
		b.ReportMetric(ms(percentile(l.ds, 99)), l.unit+"-p99-ms")
	}
}

// storeRatio is kine ÷ etcd of one load's p50 and p99.
type storeRatio struct {
	unit     string
	p50, p99 float64
}

func storeRatios(kine, etcd storeSamples) []storeRatio {
	var out []storeRatio
	for _, l := range []struct {
		unit       string
		kine, etcd []time.Duration
	}{
		{"create-p99-x", kine.create, etcd.create},
		{"added-p99-x", kine.added, etcd.added},
		{"patch-p99-x", kine.patch, etcd.patch},
		{"modified-p99-x", kine.modified, etcd.modified},
	} {
		out = append(out, storeRatio{
			unit: l.unit,
			p50:  ratio(ms(percentile(l.kine, 50)), ms(percentile(l.etcd, 50))),
			p99:  ratio(ms(percentile(l.kine, 99)), ms(percentile(l.etcd, 99))),
		})
	}
	return out
}

// runStore starts etcd when asked, then the server on a fresh home under
// dir, runs the loads into s, and stops both.
func runStore(ctx context.Context, b *testing.B, bin, etcdBin, dir string, onEtcd bool, n int, s *storeSamples) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	h, err := home.New(filepath.Join(dir, "home"))
	if err != nil {
		return err
	}
	addr, err := freeAddress()
	if err != nil {
		return err
	}
	etcdCPU := func() (time.Duration, error) { return 0, nil }
	if onEtcd {
		e, err := startEtcd(ctx, etcdBin, dir, filepath.Join(dir, "etcd.log"))
		if err != nil {
			return err
		}
		defer e.stop()
		etcdCPU = func() (time.Duration, error) { return cpuTime(e.pid()) }
		if bin, err = withEnv(dir, bin, map[string]string{envEtcdServers: e.ClientURL}); err != nil {
			return err
		}
	}
	srv, err := startServer(bin, h, addr, filepath.Join(dir, "server.log"))
	if err != nil {
		return err
	}
	defer func() {
		select {
		case <-srv.exited:
		default:
			if _, err := srv.stop(stopTimeout); err != nil {
				b.Log(err)
			}
		}
	}()
	ready, err := srv.waitReady(ctx, startTimeout)
	if err != nil {
		return err
	}
	s.ready = append(s.ready, ready.Dots)
	client, err := srv.client()
	if err != nil {
		return err
	}
	probe, token, err := srv.probeClient()
	if err != nil {
		return err
	}
	// Start-up work (the controllers' first lists, the CRDs' discovery)
	// drains before the loads, as in BenchmarkControlPlane.
	time.Sleep(settle)
	if err := createNamespace(ctx, client, benchNS); err != nil {
		return err
	}
	dots := client.Resource(dotsGVR).Namespace(benchNS)
	w, err := watchDots(ctx, h)
	if err != nil {
		return err
	}
	defer w.stop()

	server := serverFigures{ctx: ctx, probe: probe, addr: addr, token: token}
	if err := server.mark(); err != nil {
		return err
	}
	cpu := func() (self, postgres, etcd time.Duration, err error) {
		if self, postgres, err = treeCPU(srv.pid()); err != nil {
			return 0, 0, 0, err
		}
		etcd, err = etcdCPU()
		return self, postgres, etcd, err
	}
	selfBefore, postgresBefore, etcdBefore, err := cpu()
	if err != nil {
		return err
	}
	starts, returns := make([]time.Time, n), make([]time.Time, n)
	for i := range n {
		name := fmt.Sprintf("dot-%04d", i)
		starts[i] = time.Now()
		if _, err := dots.Create(ctx, newDot(benchNS, name), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create Dot %s: %w", name, err)
		}
		returns[i] = time.Now()
		s.create = append(s.create, returns[i].Sub(starts[i]))
	}
	if s.serverCreate, s.storeCreate, err = server.since("POST", "create"); err != nil {
		return err
	}
	at, err := w.wait(w.added, n)
	if err != nil {
		return err
	}
	s.early += eventLatencies(at, starts, returns, &s.added, &s.addedAfter)

	for i := range n {
		name := fmt.Sprintf("dot-%04d", i)
		starts[i] = time.Now()
		if _, err := dots.Patch(ctx, name, types.MergePatchType, instructionsPatch(i), metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("patch Dot %s: %w", name, err)
		}
		returns[i] = time.Now()
		s.patch = append(s.patch, returns[i].Sub(starts[i]))
	}
	if s.serverPatch, s.storeUpdate, err = server.since("PATCH", "update"); err != nil {
		return err
	}
	if at, err = w.wait(w.modified, n); err != nil {
		return err
	}
	s.early += eventLatencies(at, starts, returns, &s.modified, &s.modifiedAfter)
	self, postgres, etcd, err := cpu()
	if err != nil {
		return err
	}
	s.serverCPU += self - selfBefore
	s.postgresCPU += postgres - postgresBefore
	s.etcdCPU += etcd - etcdBefore
	s.dots += n
	w.stop()
	if _, err := srv.stop(stopTimeout); err != nil {
		return err
	}
	return nil
}

// eventLatencies appends, for each Dot i, from starts[i] and from
// returns[i] (0 when before) to at[i], and says how many events came
// before their request returned.
func eventLatencies(at, starts, returns []time.Time, fromStart, fromReturn *[]time.Duration) (early int) {
	for i := range at {
		*fromStart = append(*fromStart, at[i].Sub(starts[i]))
		d := at[i].Sub(returns[i])
		if d < 0 {
			early++
			d = 0
		}
		*fromReturn = append(*fromReturn, d)
	}
	return early
}

// dotWatch records when the watch first saw each bench Dot ADDED and when it
// first saw it MODIFIED with the instructions instructionsPatch gave it.
type dotWatch struct {
	mu       sync.Mutex
	added    map[int]time.Time
	modified map[int]time.Time
	closed   chan struct{}
	cancel   context.CancelFunc
}

func watchDots(ctx context.Context, h home.Layout) (*dotWatch, error) {
	// The server's client (server.client) gives up on a request after 30 s,
	// a watch included.
	client, err := kubeconfigClient(h, 0)
	if err != nil {
		return nil, err
	}
	dots := client.Resource(dotsGVR).Namespace(benchNS)
	list, err := dots.List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list Dots in %s: %w", benchNS, err)
	}
	wctx, cancel := context.WithCancel(ctx)
	wi, err := dots.Watch(wctx, metav1.ListOptions{ResourceVersion: list.GetResourceVersion()})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("watch Dots in %s: %w", benchNS, err)
	}
	w := &dotWatch{added: map[int]time.Time{}, modified: map[int]time.Time{}, closed: make(chan struct{}), cancel: func() { cancel(); wi.Stop() }}
	go func() {
		defer close(w.closed)
		for ev := range wi.ResultChan() {
			at := time.Now()
			u, ok := ev.Object.(*unstructured.Unstructured)
			if !ok {
				continue
			}
			var i int
			if _, err := fmt.Sscanf(u.GetName(), "dot-%d", &i); err != nil {
				continue
			}
			w.mu.Lock()
			switch ev.Type {
			case watch.Added:
				if _, seen := w.added[i]; !seen {
					w.added[i] = at
				}
			case watch.Modified:
				instructions, _, _ := unstructured.NestedString(u.Object, "spec", "instructions")
				if _, seen := w.modified[i]; !seen && instructions == fmt.Sprintf("Patched %d times over.", i) {
					w.modified[i] = at
				}
			}
			w.mu.Unlock()
		}
	}()
	return w, nil
}

// wait waits until m holds Dots 0..n-1 and returns their times in order.
func (w *dotWatch) wait(m map[int]time.Time, n int) ([]time.Time, error) {
	deadline := time.Now().Add(time.Minute)
	for {
		w.mu.Lock()
		got := len(m)
		if got >= n {
			at := make([]time.Time, n)
			for i := range n {
				at[i] = m[i]
			}
			w.mu.Unlock()
			return at, nil
		}
		w.mu.Unlock()
		select {
		case <-w.closed:
			return nil, fmt.Errorf("the watch ended with %d of %d events", got, n)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the watch delivered %d of %d events within a minute of the last request", got, n)
		}
	}
}

func (w *dotWatch) stop() { w.cancel() }

// serverFigures reads the API server's own latencies of the dots resource
// between two looks at its /metrics.
type serverFigures struct {
	ctx         context.Context
	probe       *http.Client
	addr, token string
	last        string
}

func (s *serverFigures) mark() error {
	text, err := scrapeMetrics(s.ctx, s.probe, s.addr, s.token)
	s.last = text
	return err
}

// since returns what the API server measured since the last look of its
// requests of verb on dots and of its store calls of operation on dots, and
// looks again. The controllers' requests of the main resource in the same
// time are in them too.
func (s *serverFigures) since(verb, operation string) (requests, store histogram, err error) {
	before := s.last
	if err := s.mark(); err != nil {
		return histogram{}, histogram{}, err
	}
	var hs [2]histogram
	for i, q := range []struct {
		name  string
		match map[string]string
	}{
		{"apiserver_request_duration_seconds", map[string]string{"verb": verb, "group": dotsGVR.Group, "resource": dotsGVR.Resource, "subresource": ""}},
		{"etcd_request_duration_seconds", map[string]string{"operation": operation, "group": dotsGVR.Group, "resource": dotsGVR.Resource}},
	} {
		then, err := findHistogram(before, q.name, q.match)
		if err != nil {
			return histogram{}, histogram{}, err
		}
		now, err := findHistogram(s.last, q.name, q.match)
		if err != nil {
			return histogram{}, histogram{}, err
		}
		hs[i] = now.minus(then)
	}
	return hs[0], hs[1], nil
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func printStoreTable(n, rounds int, began time.Time, loadBefore string, kine, etcd storeSamples) {
	var sb strings.Builder
	fmt.Fprintf(&sb, "\ninvisible-dots on kine/PostgreSQL beside etcd: %d Dots, %d rounds pooled; %d CPUs; load average %s before, %s after; %s in all\n\n",
		n, rounds, runtime.NumCPU(), loadBefore, loadAverage(), time.Since(began).Round(time.Second))
	tw := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "load (client side, ms)\tkine p50 / p99\tetcd p50 / p99\tkine÷etcd p50 / p99\tgoal")
	for _, row := range []struct {
		name       string
		kine, etcd []time.Duration
		goal       bool
	}{
		{fmt.Sprintf("create %d Dots one after another", n), kine.create, etcd.create, true},
		{"  create start to ADDED (watch open)", kine.added, etcd.added, true},
		{"  create return to ADDED (0 if before)", kine.addedAfter, etcd.addedAfter, false},
		{fmt.Sprintf("merge-patch %d Dots", n), kine.patch, etcd.patch, true},
		{"  patch start to MODIFIED", kine.modified, etcd.modified, true},
		{"  patch return to MODIFIED (0 if before)", kine.modifiedAfter, etcd.modifiedAfter, false},
	} {
		k50, k99 := ms(percentile(row.kine, 50)), ms(percentile(row.kine, 99))
		e50, e99 := ms(percentile(row.etcd, 50)), ms(percentile(row.etcd, 99))
		goal := ""
		if row.goal {
			goal = fmt.Sprintf("p99 ≤ %.1f: met", storeGoal)
			if ratio(k99, e99) > storeGoal {
				goal = fmt.Sprintf("p99 ≤ %.1f: NOT met", storeGoal)
			}
		}
		fmt.Fprintf(tw, "%s\t%.1f / %.1f\t%.1f / %.1f\t%.2f / %.2f\t%s\n", row.name, k50, k99, e50, e99, ratio(k50, e50), ratio(k99, e99), goal)
	}
	fmt.Fprintf(tw, "events before their request returned\t%d\t%d\t\t\n", kine.early, etcd.early)
	fmt.Fprintln(tw, "server side (/metrics, ms; buckets 5, 25, 50, 100 ms)\tkine\tetcd\tkine÷etcd\t")
	for _, row := range []struct {
		name       string
		kine, etcd float64
	}{
		{"POST dots, p99 (interpolated)", 1000 * kine.serverCreate.quantile(0.99), 1000 * etcd.serverCreate.quantile(0.99)},
		{"PATCH dots, p99 (interpolated)", 1000 * kine.serverPatch.quantile(0.99), 1000 * etcd.serverPatch.quantile(0.99)},
		{"store create of a Dot, mean", 1000 * kine.storeCreate.mean(), 1000 * etcd.storeCreate.mean()},
		{"store update of a Dot, mean", 1000 * kine.storeUpdate.mean(), 1000 * etcd.storeUpdate.mean()},
		{"exec to Dots listable on a fresh home, median", ms(percentile(kine.ready, 50)), ms(percentile(etcd.ready, 50))},
	} {
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.2f\t\n", row.name, row.kine, row.etcd, ratio(row.kine, row.etcd))
	}
	// The machine's CPU is what the stores share with everything else; a
	// store that needs more of it per write waits longer on a busy machine.
	fmt.Fprintln(tw, "CPU during the loads, ms per Dot created and patched\tkine\tetcd\tkine÷etcd\t")
	perDot := func(d time.Duration, dots int) float64 {
		if dots == 0 {
			return 0
		}
		return ms(d) / float64(dots)
	}
	for _, row := range []struct {
		name       string
		kine, etcd float64
	}{
		{"server process (API server, controllers, kine when it runs)", perDot(kine.serverCPU, kine.dots), perDot(etcd.serverCPU, etcd.dots)},
		{"its PostgreSQL (all its processes)", perDot(kine.postgresCPU, kine.dots), perDot(etcd.postgresCPU, etcd.dots)},
		{"etcd", perDot(kine.etcdCPU, kine.dots), perDot(etcd.etcdCPU, etcd.dots)},
		{"all of them", perDot(kine.serverCPU+kine.postgresCPU+kine.etcdCPU, kine.dots), perDot(etcd.serverCPU+etcd.postgresCPU+etcd.etcdCPU, etcd.dots)},
	} {
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.2f\t\n", row.name, row.kine, row.etcd, ratio(row.kine, row.etcd))
	}
	_ = tw.Flush()
	fmt.Fprintln(os.Stdout, sb.String())
}
