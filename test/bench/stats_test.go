package bench

import (
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
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
