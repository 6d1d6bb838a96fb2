package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// The API server's own histograms say where a request's time went: the
// whole request as the server saw it (apiserver_request_duration_seconds),
// and the store's part of it (etcd_request_duration_seconds, which under
// kine is the round trip to kine and PostgreSQL). Read before and after a
// load, their difference is that load's; set beside the client's figure, a
// store-side cost shows apart from the server's own and the client's.

// serverSide names the histograms of one load: the request's verb and
// resource, and the store operation it makes.
type serverSide struct {
	Verb, Resource string // apiserver_request_duration_seconds{verb,resource}
	StoreOp        string // etcd_request_duration_seconds{operation}, e.g. "create", "update"
	Group          string // the resource's API group, for the store's histogram
}

// histogram is a cumulative histogram: upper bound -> count at or below.
type histogram map[float64]uint64

// scrape reads /metrics with the admin token and returns the summed
// histograms of the request and of the store for s.
func (srv *server) scrape(ctx context.Context, s serverSide) (request, storage histogram, err error) {
	probe, token, err := srv.probeClient()
	if err != nil {
		return nil, nil, err
	}
	probe.Timeout = 0
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+srv.addr+"/metrics", nil)
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := probe.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("read the API server's /metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, nil, fmt.Errorf("read the API server's /metrics: %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, nil, fmt.Errorf("parse the API server's /metrics: %w", err)
	}
	// The object's own requests, not its status subresource's (the
	// controllers' writes).
	request = sumHistograms(families["apiserver_request_duration_seconds"], map[string]string{"verb": s.Verb, "resource": s.Resource, "subresource": ""})
	// The store's operations are counted per resource, the controllers'
	// status writes with the rest: read it as the store's cost of a write
	// of a Dot during the load.
	storage = sumHistograms(families["etcd_request_duration_seconds"], map[string]string{"operation": s.StoreOp, "group": s.Group, "resource": s.Resource})
	return request, storage, nil
}

// sumHistograms adds up the histograms of f whose labels include want.
func sumHistograms(f *dto.MetricFamily, want map[string]string) histogram {
	h := histogram{}
	if f == nil {
		return h
	}
	for _, m := range f.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		match := true
		for k, v := range want {
			if labels[k] != v {
				match = false
			}
		}
		if !match || m.GetHistogram() == nil {
			continue
		}
		for _, b := range m.GetHistogram().GetBucket() {
			// The text format lists le="+Inf" too: it is the sample
			// count, added below once.
			if !math.IsInf(b.GetUpperBound(), 1) {
				h[b.GetUpperBound()] += b.GetCumulativeCount()
			}
		}
		h[math.Inf(1)] += m.GetHistogram().GetSampleCount()
	}
	return h
}

// minus is h's counts less those of before: the load between two scrapes.
func (h histogram) minus(before histogram) histogram {
	d := histogram{}
	for le, n := range h {
		d[le] = n - before[le]
	}
	return d
}

// count is how many observations h holds.
func (h histogram) count() uint64 { return h[math.Inf(1)] }

// quantile estimates the q-th quantile (0 < q < 1) in milliseconds as
// Prometheus' histogram_quantile does: linear within the bucket that holds
// it. The histograms' buckets are coarse (5, 10, 25, 50, 100 ms ...), so the
// figure says which bucket, not the exact value; NaN for an empty histogram.
func (h histogram) quantile(q float64) float64 {
	total := h.count()
	if total == 0 {
		return math.NaN()
	}
	bounds := make([]float64, 0, len(h))
	for le := range h {
		bounds = append(bounds, le)
	}
	slices.Sort(bounds)
	rank := q * float64(total)
	lower, below := 0.0, uint64(0)
	for _, le := range bounds {
		n := h[le]
		if float64(n) >= rank {
			if math.IsInf(le, 1) {
				return lower * 1000
			}
			inBucket := float64(n - below)
			if inBucket == 0 {
				return le * 1000
			}
			return (lower + (le-lower)*(rank-float64(below))/inBucket) * 1000
		}
		lower, below = le, n
	}
	return lower * 1000
}

// measured is one load's share of the server's histograms.
type measured struct {
	Request, Store histogram
}

// profileSeconds is how much of a load a CPU profile covers (BENCH_PROFILE):
// the server's pprof takes a duration up front, and 20 s holds most of a
// 1000-Dot loop on 2 cores.
const profileSeconds = 20

// measure runs load between two scrapes of the server's histograms for s,
// and, with BENCH_PROFILE=DIR, takes a CPU profile of the server during it
// into DIR/<name>.pprof.
func (srv *server) measure(ctx context.Context, name string, s serverSide, load func() error) (measured, error) {
	req0, store0, err := srv.scrape(ctx, s)
	if err != nil {
		return measured{}, err
	}
	profiled := make(chan error, 1)
	if dir := os.Getenv(envProfile); dir != "" {
		go func() { profiled <- srv.cpuProfile(ctx, filepath.Join(dir, name+".pprof"), profileSeconds) }()
	} else {
		profiled <- nil
	}
	if err := load(); err != nil {
		return measured{}, err
	}
	if err := <-profiled; err != nil {
		return measured{}, err
	}
	req1, store1, err := srv.scrape(ctx, s)
	if err != nil {
		return measured{}, err
	}
	return measured{Request: req1.minus(req0), Store: store1.minus(store0)}, nil
}

// cpuProfile writes seconds of the server's CPU profile to path.
func (srv *server) cpuProfile(ctx context.Context, path string, seconds int) error {
	return srv.profile(ctx, path, fmt.Sprintf("profile?seconds=%d", seconds))
}

// heapProfile writes the server's heap profile to path, with BENCH_PROFILE
// set (nothing without it).
func (srv *server) heapProfile(ctx context.Context, name string) error {
	dir := os.Getenv(envProfile)
	if dir == "" {
		return nil
	}
	return srv.profile(ctx, filepath.Join(dir, name+".pprof"), "heap?gc=1")
}

// profile writes the server's /debug/pprof/<what> to path.
func (srv *server) profile(ctx context.Context, path, what string) error {
	probe, token, err := srv.probeClient()
	if err != nil {
		return err
	}
	probe.Timeout = 0
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("https://%s/debug/pprof/%s", srv.addr, what), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := probe.Do(req)
	if err != nil {
		return fmt.Errorf("take the server's profile %s: %w", what, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("take the server's profile %s: %s (was the server started with --profiling?)", what, resp.Status)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}
