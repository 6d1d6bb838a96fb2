package bench

import (
	"math"
	"testing"
)

const scrape = `# HELP apiserver_request_duration_seconds [STABLE] Response latency distribution
# TYPE apiserver_request_duration_seconds histogram
apiserver_request_duration_seconds_bucket{component="apiserver",dry_run="",group="dots.invisible.dev",resource="dots",scope="resource",subresource="",verb="POST",version="v1alpha1",le="0.005"} 10
apiserver_request_duration_seconds_bucket{component="apiserver",dry_run="",group="dots.invisible.dev",resource="dots",scope="resource",subresource="",verb="POST",version="v1alpha1",le="0.025"} 90
apiserver_request_duration_seconds_bucket{component="apiserver",dry_run="",group="dots.invisible.dev",resource="dots",scope="resource",subresource="",verb="POST",version="v1alpha1",le="0.05"} 100
apiserver_request_duration_seconds_bucket{component="apiserver",dry_run="",group="dots.invisible.dev",resource="dots",scope="resource",subresource="",verb="POST",version="v1alpha1",le="+Inf"} 100
apiserver_request_duration_seconds_sum{component="apiserver",dry_run="",group="dots.invisible.dev",resource="dots",scope="resource",subresource="",verb="POST",version="v1alpha1"} 1.5
apiserver_request_duration_seconds_count{component="apiserver",dry_run="",group="dots.invisible.dev",resource="dots",scope="resource",subresource="",verb="POST",version="v1alpha1"} 100
apiserver_request_duration_seconds_bucket{component="apiserver",dry_run="",group="dots.invisible.dev",resource="dots",scope="resource",subresource="status",verb="POST",version="v1alpha1",le="0.005"} 7
apiserver_request_duration_seconds_bucket{component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1",le="0.005"} 3
# TYPE etcd_request_duration_seconds histogram
etcd_request_duration_seconds_sum{group="dots.invisible.dev",operation="create",resource="dots"} 0.4
etcd_request_duration_seconds_count{group="dots.invisible.dev",operation="create",resource="dots"} 100
weird_total{a="x\"y,z",b="\\"} 1
`

func TestFindHistogram(t *testing.T) {
	h, err := findHistogram(scrape, "apiserver_request_duration_seconds",
		map[string]string{"verb": "POST", "resource": "dots", "subresource": ""})
	if err != nil {
		t.Fatal(err)
	}
	if h.count != 100 || h.sum != 1.5 || len(h.bounds) != 4 || h.counts[1] != 90 || h.counts[3] != 100 {
		t.Fatalf("histogram = %+v", h)
	}
	// The 50th observation is the 40th of the 80 in (5, 25] ms.
	if got, want := h.quantile(0.5), 0.005+0.020*40/80; math.Abs(got-want) > 1e-9 {
		t.Errorf("p50 = %v, want %v", got, want)
	}
	// The 99th is the 9th of the 10 in (25, 50] ms.
	if got, want := h.quantile(0.99), 0.025+0.025*9/10; math.Abs(got-want) > 1e-9 {
		t.Errorf("p99 = %v, want %v", got, want)
	}
	if d := h.minus(h); d.count != 0 || d.quantile(0.99) != 0 {
		t.Errorf("a histogram minus itself = %+v", d)
	}
	s, err := findHistogram(scrape, "etcd_request_duration_seconds", map[string]string{"operation": "create"})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.mean(); math.Abs(got-0.004) > 1e-9 {
		t.Errorf("mean = %v, want 0.004", got)
	}
}
