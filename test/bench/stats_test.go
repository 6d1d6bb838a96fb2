package bench

import (
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

func TestPercentile(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = 100 - i // unsorted on purpose
	}
	tests := map[string]struct {
		in   []time.Duration
		p    float64
		want time.Duration
	}{
		"none is zero":           {nil, 50, 0},
		"one is itself":          {ms(7), 99, 7 * time.Millisecond},
		"median of odd count":    {ms(3, 1, 2), 50, 2 * time.Millisecond},
		"median of even count":   {ms(4, 1, 3, 2), 50, 2 * time.Millisecond},
		"p99 of 100 is the 99th": {ms(hundred...), 99, 99 * time.Millisecond},
		"p100 is the maximum":    {ms(hundred...), 100, 100 * time.Millisecond},
		"p99 of 10 is the top":   {ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 99, 10 * time.Millisecond},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			before := append([]time.Duration(nil), tc.in...)
			if got := percentile(tc.in, tc.p); got != tc.want {
				t.Errorf("percentile(%v, %v) = %v, want %v", tc.in, tc.p, got, tc.want)
			}
			if diff := cmp.Diff(before, tc.in); diff != "" {
				t.Errorf("percentile changed its input (-before +after):\n%s", diff)
			}
		})
	}
}

func TestKBField(t *testing.T) {
	status := []byte("Name:\tpostgres\nVmPeak:\t  200 kB\nVmRSS:\t   12345 kB\nThreads:\t1\n")
	tests := map[string]struct {
		data    []byte
		field   string
		want    int64
		wantErr bool
	}{
		"rss in bytes":       {status, "VmRSS:", 12345 * 1024, false},
		"prefix is not hit":  {status, "VmPeak:", 200 * 1024, false},
		"missing field":      {status, "Pss:", 0, true},
		"not a kB field":     {status, "Threads:", 0, true},
		"garbage number":     {[]byte("Pss: lots kB\n"), "Pss:", 0, true},
		"smaps_rollup shape": {[]byte("55d0-7ffc ---p 00000000 00:00 0 [rollup]\nRss:  100 kB\nPss:   40 kB\n"), "Pss:", 40 * 1024, false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := kBField(tc.data, tc.field)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("kBField(%q, %q) = %d, %v; want %d, error %v", tc.data, tc.field, got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestParseStat(t *testing.T) {
	tests := map[string]struct {
		line string
		want proc
	}{
		"plain":                 {"42 (postgres) S 7 42 42 0 -1", proc{pid: 42, ppid: 7, comm: "postgres"}},
		"name with paren+space": {"9 (a) b (c) R 3 9 9", proc{pid: 9, ppid: 3, comm: "a) b (c"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := parseStat(tc.want.pid, []byte(tc.line))
			if err != nil {
				t.Fatalf("parseStat(%q): %v", tc.line, err)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(proc{})); diff != "" {
				t.Errorf("parseStat(%q) (-want +got):\n%s", tc.line, diff)
			}
		})
	}
}

// TestTreeMemoryOfThisProcess reads this test's own memory: a real /proc,
// and a process whose RSS cannot be zero.
func TestTreeMemoryOfThisProcess(t *testing.T) {
	self, _, _, err := treeMemory(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if self.RSS <= 0 || self.PSS <= 0 || self.Processes != 1 {
		t.Errorf("treeMemory(self) = %+v, want a positive RSS and PSS of one process", self)
	}
}

func TestHistogramQuantileInterpolatesWithinTheBucket(t *testing.T) {
	inf := math.Inf(1)
	before := histogram{0.005: 5, 0.01: 5, 0.025: 5, inf: 5}
	after := histogram{0.005: 15, 0.01: 65, 0.025: 105, inf: 105}
	h := after.minus(before)
	if h.count() != 100 {
		t.Fatalf("count() = %d, want 100", h.count())
	}
	for _, c := range []struct{ q, want float64 }{
		{0.05, 2.5},    // halfway into the first bucket, from 0
		{0.5, 9},       // 40 of the 50 in (5, 10] ms
		{0.99, 24.625}, // 39 of the 40 in (10, 25] ms
	} {
		if got := h.quantile(c.q); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("quantile(%v) = %v ms, want %v", c.q, got, c.want)
		}
	}
	if got := (histogram{}).quantile(0.99); !math.IsNaN(got) {
		t.Errorf("quantile of an empty histogram = %v, want NaN", got)
	}
	// Beyond the last finite bound, the bound is all a histogram can say.
	if got := (histogram{0.05: 0, inf: 3}).quantile(0.99); got != 50 {
		t.Errorf("quantile past the last bucket = %v ms, want 50", got)
	}
}

func TestSumHistogramsReadsTheTextFormatOnceAndByLabel(t *testing.T) {
	const text = `# TYPE apiserver_request_duration_seconds histogram
apiserver_request_duration_seconds_bucket{verb="POST",resource="dots",subresource="",le="0.005"} 1
apiserver_request_duration_seconds_bucket{verb="POST",resource="dots",subresource="",le="0.025"} 3
apiserver_request_duration_seconds_bucket{verb="POST",resource="dots",subresource="",le="+Inf"} 4
apiserver_request_duration_seconds_sum{verb="POST",resource="dots",subresource=""} 0.2
apiserver_request_duration_seconds_count{verb="POST",resource="dots",subresource=""} 4
apiserver_request_duration_seconds_bucket{verb="POST",resource="dots",subresource="status",le="0.005"} 0
apiserver_request_duration_seconds_bucket{verb="POST",resource="dots",subresource="status",le="0.025"} 0
apiserver_request_duration_seconds_bucket{verb="POST",resource="dots",subresource="status",le="+Inf"} 9
apiserver_request_duration_seconds_sum{verb="POST",resource="dots",subresource="status"} 9
apiserver_request_duration_seconds_count{verb="POST",resource="dots",subresource="status"} 9
`
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	h := sumHistograms(families["apiserver_request_duration_seconds"], map[string]string{"verb": "POST", "resource": "dots", "subresource": ""})
	want := histogram{0.005: 1, 0.025: 3, math.Inf(1): 4}
	if diff := cmp.Diff(want, h); diff != "" {
		t.Errorf("sumHistograms() (-want +got):\n%s", diff)
	}
	// One of the 4 is above 25 ms: the p99 is past the last finite bound.
	if got := h.quantile(0.99); got != 25 {
		t.Errorf("quantile(0.99) = %v ms, want 25", got)
	}
}
