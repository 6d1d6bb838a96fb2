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
	"testing"
	"text/tabwriter"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/invisible-dots/invisible-dots/internal/home"
)

const (
	// envEtcd names the etcd binary (default: etcd on PATH, which Debian's
	// etcd-server package installs as /usr/bin/etcd).
	envEtcd = "BENCH_ETCD"
	// envEtcdServers is the server's variable that stores its resources in
	// an external etcd (internal/cli/server.go).
	envEtcdServers = "INVISIBLE_DOTS_ETCD_SERVERS"
	// storeDots is the default number of Dots of each load (BENCH_DOTS
	// replaces it).
	storeDots = 300
	// storeGoal is the ratio kine on PostgreSQL ÷ etcd the p99s should stay
	// within.
	storeGoal = 1.2
)

// storeRun is one store's figures: the client's latencies of each load and
// the API server's own, from its /metrics.
type storeRun struct {
	name string
	// create, patch and watch are p50 and p99 in ms: n creates one after
	// another, n merge patches, and create-to-ADDED with a watch open
	// (watchLatency, watchCount Dots, from the create's start).
	create, patch, watch [2]float64
	// serverCreate and serverPatch are the API server's request latency of
	// POST and PATCH of dots during the load (apiserver_request_duration_
	// seconds, bucket-interpolated p99, ms); storeCreate and storeUpdate
	// the mean of its calls to the store (etcd_request_duration_seconds).
	serverCreate, serverPatch float64
	storeCreate, storeUpdate  float64
	ready                     time.Duration
}

// BenchmarkStoreBesideEtcd runs the same server twice on fresh homes, once
// on its own store (kine on PostgreSQL) and once on upstream's (etcd, a
// throwaway single member), and the same loads against each: n Dots created
// one after another, each merge-patched, then create-to-ADDED latency with a
// watch open. The figure is the ratio kine ÷ etcd of each p99 (goal ≤ 1.2).
// Each server has the machine to itself; the controllers run in both, as in
// the product. Run it once: -benchtime=1x.
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
	n := storeDots
	if v := os.Getenv(envDots); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			b.Fatalf("%s=%q is not a positive number of Dots", envDots, v)
		}
	}
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

	stores := []struct {
		name string
		etcd bool
	}{{"kine-postgresql", false}, {"etcd", true}}
	runs := make([]storeRun, len(stores))
	for i, st := range stores {
		var (
			done bool
			err  error
		)
		ok := b.Run(st.name, func(b *testing.B) {
			if !done {
				runs[i], err = runStore(ctx, b, bin, etcdBin, filepath.Join(root, st.name), st.name, st.etcd, n)
				done = true
			}
			if err != nil {
				b.Fatal(err)
			}
			r := runs[i]
			b.ReportMetric(0, "ns/op")
			for _, m := range []struct {
				v    float64
				unit string
			}{
				{r.create[0], "create-p50-ms"}, {r.create[1], "create-p99-ms"},
				{r.patch[0], "patch-p50-ms"}, {r.patch[1], "patch-p99-ms"},
				{r.watch[0], "watch-p50-ms"}, {r.watch[1], "watch-p99-ms"},
			} {
				b.ReportMetric(m.v, m.unit)
			}
		})
		if !ok {
			return
		}
	}
	kine, etcd := runs[0], runs[1]
	b.Run("ratio", func(b *testing.B) {
		b.ReportMetric(0, "ns/op")
		b.ReportMetric(ratio(kine.create[1], etcd.create[1]), "create-p99-x")
		b.ReportMetric(ratio(kine.patch[1], etcd.patch[1]), "patch-p99-x")
		b.ReportMetric(ratio(kine.watch[1], etcd.watch[1]), "watch-p99-x")
	})
	printStoreTable(n, began, loadBefore, kine, etcd)
}

// runStore starts etcd when asked, then the server on a fresh home under
// dir, runs the loads, and stops both.
func runStore(ctx context.Context, b *testing.B, bin, etcdBin, dir, name string, onEtcd bool, n int) (storeRun, error) {
	r := storeRun{name: name}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return r, err
	}
	h, err := home.New(filepath.Join(dir, "home"))
	if err != nil {
		return r, err
	}
	addr, err := freeAddress()
	if err != nil {
		return r, err
	}
	if onEtcd {
		e, err := startEtcd(ctx, etcdBin, dir, filepath.Join(dir, "etcd.log"))
		if err != nil {
			return r, err
		}
		defer e.stop()
		if bin, err = withEnv(dir, bin, map[string]string{envEtcdServers: e.ClientURL}); err != nil {
			return r, err
		}
	}
	srv, err := startServer(bin, h, addr, filepath.Join(dir, "server.log"))
	if err != nil {
		return r, err
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
		return r, err
	}
	r.ready = ready.Dots
	client, err := srv.client()
	if err != nil {
		return r, err
	}
	probe, token, err := srv.probeClient()
	if err != nil {
		return r, err
	}
	// Start-up work (the controllers' first lists, the CRDs' discovery)
	// drains before the loads, as in BenchmarkControlPlane.
	time.Sleep(settle)
	if err := createNamespace(ctx, client, benchNS); err != nil {
		return r, err
	}
	dots := client.Resource(dotsGVR).Namespace(benchNS)

	server := serverFigures{ctx: ctx, probe: probe, addr: addr, token: token}
	if err := server.mark(); err != nil {
		return r, err
	}
	lat := make([]time.Duration, 0, n)
	for i := range n {
		name := fmt.Sprintf("dot-%04d", i)
		t := time.Now()
		if _, err := dots.Create(ctx, newDot(benchNS, name), metav1.CreateOptions{}); err != nil {
			return r, fmt.Errorf("create Dot %s: %w", name, err)
		}
		lat = append(lat, time.Since(t))
	}
	r.create = p50p99(lat)
	if r.serverCreate, r.storeCreate, err = server.since("POST", "create"); err != nil {
		return r, err
	}

	lat = lat[:0]
	for i := range n {
		name := fmt.Sprintf("dot-%04d", i)
		t := time.Now()
		if _, err := dots.Patch(ctx, name, types.MergePatchType, instructionsPatch(i), metav1.PatchOptions{}); err != nil {
			return r, fmt.Errorf("patch Dot %s: %w", name, err)
		}
		lat = append(lat, time.Since(t))
	}
	r.patch = p50p99(lat)
	if r.serverPatch, r.storeUpdate, err = server.since("PATCH", "update"); err != nil {
		return r, err
	}

	// watchLatency's first two metrics are p50 and p99 from the create's
	// start; its rows go to a report of this store alone.
	rep := &report{}
	m, err := watchLatency(ctx, client, rep)
	if err != nil {
		return r, err
	}
	r.watch = [2]float64{m[0].value, m[1].value}
	if _, err := srv.stop(stopTimeout); err != nil {
		return r, err
	}
	return r, nil
}

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

// since returns the p99 of the API server's requests of verb on dots and
// the mean of its store calls of operation on dots since the last look, in
// ms, and looks again.
func (s *serverFigures) since(verb, operation string) (requestP99, storeMean float64, err error) {
	before := s.last
	if err := s.mark(); err != nil {
		return 0, 0, err
	}
	request := map[string]string{"verb": verb, "group": dotsGVR.Group, "resource": dotsGVR.Resource, "subresource": ""}
	store := map[string]string{"operation": operation, "group": dotsGVR.Group, "resource": dotsGVR.Resource}
	var hs [2]histogram
	for i, q := range []struct {
		name  string
		match map[string]string
	}{{"apiserver_request_duration_seconds", request}, {"etcd_request_duration_seconds", store}} {
		then, err := findHistogram(before, q.name, q.match)
		if err != nil {
			return 0, 0, err
		}
		now, err := findHistogram(s.last, q.name, q.match)
		if err != nil {
			return 0, 0, err
		}
		hs[i] = now.minus(then)
	}
	return 1000 * hs[0].quantile(0.99), 1000 * hs[1].mean(), nil
}

func p50p99(ds []time.Duration) [2]float64 {
	return [2]float64{ms(percentile(ds, 50)), ms(percentile(ds, 99))}
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func printStoreTable(n int, began time.Time, loadBefore string, kine, etcd storeRun) {
	var sb strings.Builder
	fmt.Fprintf(&sb, "\ninvisible-dots on kine/PostgreSQL beside etcd, %d Dots (watch: %d); %d CPUs; load average %s before, %s after; %s in all\n\n",
		n, watchCount, runtime.NumCPU(), loadBefore, loadAverage(), time.Since(began).Round(time.Second))
	tw := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "load (client side, ms)\tkine p50 / p99\tetcd p50 / p99\tkine÷etcd p50 / p99\tgoal p99")
	for _, row := range []struct {
		name       string
		kine, etcd [2]float64
	}{
		{fmt.Sprintf("create %d Dots one after another", n), kine.create, etcd.create},
		{fmt.Sprintf("merge-patch %d Dots", n), kine.patch, etcd.patch},
		{fmt.Sprintf("create-to-ADDED, watch open (%d)", watchCount), kine.watch, etcd.watch},
	} {
		x := ratio(row.kine[1], row.etcd[1])
		verdict := "met"
		if x > storeGoal {
			verdict = "NOT met"
		}
		fmt.Fprintf(tw, "%s\t%.1f / %.1f\t%.1f / %.1f\t%.2f / %.2f\t≤ %.1f: %s\n",
			row.name, row.kine[0], row.kine[1], row.etcd[0], row.etcd[1], ratio(row.kine[0], row.etcd[0]), x, storeGoal, verdict)
	}
	fmt.Fprintln(tw, "server side (API server /metrics, ms)\tkine\tetcd\tkine÷etcd\t")
	for _, row := range []struct {
		name       string
		kine, etcd float64
	}{
		{"POST dots p99 (buckets 5/25/50 ms, interpolated)", kine.serverCreate, etcd.serverCreate},
		{"PATCH dots p99 (same)", kine.serverPatch, etcd.serverPatch},
		{"store create of a Dot, mean", kine.storeCreate, etcd.storeCreate},
		{"store update of a Dot, mean", kine.storeUpdate, etcd.storeUpdate},
		{"start to Dots listable (fresh home)", ms(kine.ready), ms(etcd.ready)},
	} {
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.2f\t\n", row.name, row.kine, row.etcd, ratio(row.kine, row.etcd))
	}
	_ = tw.Flush()
	fmt.Fprintln(os.Stdout, sb.String())
}
