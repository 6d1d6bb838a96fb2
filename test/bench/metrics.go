package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

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

// quantile is the q-th quantile (0 < q < 1) as Prometheus' histogram_quantile
// estimates it: linear within the bucket it falls in, the first bucket
// starting at 0; the highest finite bound when it falls in +Inf. The
// buckets of the API server's latencies are coarse (5, 25, 50, 100 ms...),
// so this tells which bucket, not the value.
func (h histogram) quantile(q float64) float64 {
	if h.count <= 0 || len(h.bounds) == 0 {
		return 0
	}
	rank := q * h.count
	lower, below := 0.0, 0.0
	for i, upper := range h.bounds {
		if h.counts[i] >= rank {
			if upper > 1e300 { // +Inf
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

// findHistogram sums, from a scrape in Prometheus' text format, the series
// of the histogram name whose labels include every pair of match.
func findHistogram(text, name string, match map[string]string) (histogram, error) {
	var h histogram
	byBound := map[float64]float64{}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		series, value, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		metric, labels, _ := strings.Cut(series, "{")
		suffix, ok := strings.CutPrefix(metric, name+"_")
		if !ok || (suffix != "bucket" && suffix != "sum" && suffix != "count") {
			continue
		}
		ls, err := parseLabels(strings.TrimSuffix(labels, "}"))
		if err != nil {
			return histogram{}, fmt.Errorf("%s: %w", line, err)
		}
		if !matches(ls, match) {
			continue
		}
		v, err := strconv.ParseFloat(strings.Fields(value)[0], 64)
		if err != nil {
			return histogram{}, fmt.Errorf("%s: value: %w", line, err)
		}
		switch suffix {
		case "sum":
			h.sum += v
		case "count":
			h.count += v
		case "bucket":
			le, err := strconv.ParseFloat(ls["le"], 64)
			if err != nil {
				return histogram{}, fmt.Errorf("%s: le: %w", line, err)
			}
			byBound[le] += v
		}
	}
	if err := sc.Err(); err != nil {
		return histogram{}, err
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

func matches(labels, want map[string]string) bool {
	for k, v := range want {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// parseLabels reads `a="x",b="y"` with Prometheus' escapes (\\, \", \n).
func parseLabels(s string) (map[string]string, error) {
	out := map[string]string{}
	for s != "" {
		name, rest, ok := strings.Cut(s, `="`)
		if !ok {
			return nil, fmt.Errorf("labels %q: no value", s)
		}
		var v strings.Builder
		i := 0
		for ; i < len(rest) && rest[i] != '"'; i++ {
			if rest[i] == '\\' && i+1 < len(rest) {
				i++
				if rest[i] == 'n' {
					v.WriteByte('\n')
					continue
				}
			}
			v.WriteByte(rest[i])
		}
		if i == len(rest) {
			return nil, fmt.Errorf("labels %q: unterminated value", s)
		}
		out[strings.TrimPrefix(name, ",")] = v.String()
		s = strings.TrimPrefix(rest[i+1:], ",")
	}
	return out, nil
}
