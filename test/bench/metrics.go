package bench

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"

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

// histogram is a Prometheus histogram summed over the series that matched:
// the cumulative count at each upper bound (+Inf last), the sum and the count.
type histogram struct {
	bounds []float64
	counts []float64
	sum    float64
	count  float64
}

// minus is what h counted since earlier (an older scrape of the same series).
func (h histogram) minus(earlier histogram) histogram {
	out := histogram{bounds: h.bounds, counts: slices.Clone(h.counts), sum: h.sum - earlier.sum, count: h.count - earlier.count}
	for i := range out.counts {
		if i < len(earlier.counts) {
			out.counts[i] -= earlier.counts[i]
		}
	}
	return out
}

// plus adds o's observations to h's (the same series scraped from another
// server).
func (h histogram) plus(o histogram) histogram {
	if len(h.bounds) == 0 {
		return o
	}
	out := histogram{bounds: h.bounds, counts: slices.Clone(h.counts), sum: h.sum + o.sum, count: h.count + o.count}
	for i := range out.counts {
		if i < len(o.counts) {
			out.counts[i] += o.counts[i]
		}
	}
	return out
}

// quantile is the q-th quantile (0 < q < 1), in seconds, as Prometheus'
// histogram_quantile estimates it: linear within the bucket it falls in, the
// first bucket starting at 0; the highest finite bound when it falls in
// +Inf. The buckets of the API server's latencies are coarse (5, 25, 50,
// 100 ms...), so this tells which bucket, not the value.
func (h histogram) quantile(q float64) float64 {
	if h.count <= 0 || len(h.bounds) == 0 {
		return 0
	}
	rank := q * h.count
	lower, below := 0.0, 0.0
	for i, upper := range h.bounds {
		if h.counts[i] >= rank {
			if math.IsInf(upper, 1) {
				return lower
			}
			in := h.counts[i] - below
			if in <= 0 {
				return upper
			}
			return lower + (upper-lower)*(rank-below)/in
		}
		lower, below = upper, h.counts[i]
	}
	return lower
}

// mean is sum/count, 0 for no observations.
func (h histogram) mean() float64 {
	if h.count <= 0 {
		return 0
	}
	return h.sum / h.count
}

// scrapeMetrics reads the API server's /metrics with the admin token.
func scrapeMetrics(ctx context.Context, c *http.Client, addr, token string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/metrics", nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.Do(req)
	if err != nil {
		return "", fmt.Errorf("read /metrics: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", fmt.Errorf("read /metrics: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("/metrics answered %s", resp.Status)
	}
	return string(body), nil
}

// findHistogram sums, from a scrape in Prometheus' text format (read by
// Prometheus' own parser), the series of the histogram name whose labels
// include every pair of match.
func findHistogram(text, name string, match map[string]string) (histogram, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		return histogram{}, fmt.Errorf("parse /metrics: %w", err)
	}
	var h histogram
	byBound := map[float64]float64{}
	f := families[name]
	for _, m := range f.GetMetric() {
		if m.GetHistogram() == nil || !matches(m.GetLabel(), match) {
			continue
		}
		hist := m.GetHistogram()
		h.sum += hist.GetSampleSum()
		h.count += float64(hist.GetSampleCount())
		hasInf := false
		for _, b := range hist.GetBucket() {
			byBound[b.GetUpperBound()] += float64(b.GetCumulativeCount())
			hasInf = hasInf || math.IsInf(b.GetUpperBound(), 1)
		}
		// The +Inf bucket is the count; a series may list it or not.
		if !hasInf {
			byBound[math.Inf(1)] += float64(hist.GetSampleCount())
		}
	}
	for b := range byBound {
		h.bounds = append(h.bounds, b)
	}
	slices.Sort(h.bounds)
	for _, b := range h.bounds {
		h.counts = append(h.counts, byBound[b])
	}
	return h, nil
}

// matches: every pair of want is among labels.
func matches(labels []*dto.LabelPair, want map[string]string) bool {
	have := make(map[string]string, len(labels))
	for _, l := range labels {
		have[l.GetName()] = l.GetValue()
	}
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

// serverSide names the histograms of one load: the request's verb and
// resource, and the store operation it makes.
type serverSide struct {
	Verb, Resource string // apiserver_request_duration_seconds{verb,resource}
	StoreOp        string // etcd_request_duration_seconds{operation}, e.g. "create", "update"
	Group          string // the resource's API group, for the store's histogram
}

// measured is one load's share of the server's histograms, and the writes
// it caused.
type measured struct {
	Request, Store histogram
	// Writes counts the API server's write requests (create, update,
	// patch, delete) by resource ("tasks", "tasks/status"): the load's own
	// and the controllers' it woke, so a load's write amplification shows.
	Writes map[string]float64
}

// writeVerbs are the verbs of apiserver_request_total that write.
var writeVerbs = map[string]bool{"POST": true, "PUT": true, "PATCH": true, "DELETE": true}

// findWrites sums apiserver_request_total's write requests by resource and
// subresource.
func findWrites(text string) (map[string]float64, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		return nil, fmt.Errorf("parse /metrics: %w", err)
	}
	out := map[string]float64{}
	for _, m := range families["apiserver_request_total"].GetMetric() {
		l := map[string]string{}
		for _, p := range m.GetLabel() {
			l[p.GetName()] = p.GetValue()
		}
		if !writeVerbs[l["verb"]] {
			continue
		}
		key := l["resource"]
		if l["subresource"] != "" {
			key += "/" + l["subresource"]
		}
		out[key] += m.GetCounter().GetValue()
	}
	return out, nil
}

// writesLine lists the writes of m, most first ("tasks 2000 (1.00 each),
// tasks/status 1990 (0.99 each)"), each also per load unit when per > 0.
func (m measured) writesLine(per float64) string {
	keys := make([]string, 0, len(m.Writes))
	for k, v := range m.Writes {
		if v >= 1 {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b string) int {
		if c := cmp.Compare(m.Writes[b], m.Writes[a]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	var parts []string
	for _, k := range keys {
		if per > 0 {
			parts = append(parts, fmt.Sprintf("%s %.0f (%.2f each)", k, m.Writes[k], m.Writes[k]/per))
		} else {
			parts = append(parts, fmt.Sprintf("%s %.0f", k, m.Writes[k]))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// scrape reads /metrics and returns the summed histograms of the request
// and of the store for s.
func (srv *server) scrape(ctx context.Context, s serverSide) (measured, error) {
	probe, token, err := srv.probeClient()
	if err != nil {
		return measured{}, err
	}
	probe.Timeout = 0
	text, err := scrapeMetrics(ctx, probe, srv.addr, token)
	if err != nil {
		return measured{}, err
	}
	// The object's own requests, not its status subresource's (the
	// controllers' writes).
	req, err := findHistogram(text, "apiserver_request_duration_seconds", map[string]string{"verb": s.Verb, "resource": s.Resource, "subresource": ""})
	if err != nil {
		return measured{}, err
	}
	// The store's operations are counted per resource, the controllers'
	// status writes with the rest: read it as the store's cost of a write
	// of that resource during the load.
	store, err := findHistogram(text, "etcd_request_duration_seconds", map[string]string{"operation": s.StoreOp, "group": s.Group, "resource": s.Resource})
	if err != nil {
		return measured{}, err
	}
	writes, err := findWrites(text)
	return measured{Request: req, Store: store, Writes: writes}, err
}

// envProfile=DIR starts the server with --profiling and takes a CPU profile
// of it in each of the create and patch loads (their first profileSeconds)
// and its heap at each memory figure, into DIR, for `go tool pprof`.
const envProfile = "BENCH_PROFILE"

// profileSeconds is how much of a load a CPU profile covers (BENCH_PROFILE):
// the server's pprof takes a duration up front, and 20 s holds most of a
// 1000-Dot loop on 2 cores.
const profileSeconds = 20

// measure runs load between two scrapes of the server's histograms for s,
// and, with BENCH_PROFILE=DIR, takes a CPU profile of the server during it
// into DIR/<name>.pprof.
func (srv *server) measure(ctx context.Context, name string, s serverSide, load func() error) (measured, error) {
	before, err := srv.scrape(ctx, s)
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
	after, err := srv.scrape(ctx, s)
	if err != nil {
		return measured{}, err
	}
	writes := map[string]float64{}
	for k, v := range after.Writes {
		writes[k] = v - before.Writes[k]
	}
	return measured{Request: after.Request.minus(before.Request), Store: after.Store.minus(before.Store), Writes: writes}, nil
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
