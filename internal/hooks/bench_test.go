package hooks

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
)

// BenchmarkListenerAccept is the listener's own share of a delivery's
// accept: a signed GitHub delivery through the handler (signature, id,
// rate limit, template, Task) to its 202, the Task "made" by fakeTasks (a
// map: no API server, no database). The real server's
// figure, Task made through the API server on PostgreSQL, is
// test/bench's BenchmarkWebhookAccept.
func BenchmarkListenerAccept(b *testing.B) {
	f := newFixture(&testing.T{}, Options{Rate: 1e9, Burst: 1e9})
	f.l.o.Client = interceptor.NewClient(f.client.(client.WithWatch), interceptor.Funcs{Create: (&fakeTasks{made: map[string]bool{}}).create})
	body := []byte(`{"title":"the build is red","repository":{"full_name":"acme/app"}}`)
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		d := f.github("gh", "d-"+strconv.Itoa(i), body)
		req := httptest.NewRequestWithContext(context.Background(), http.MethodPost, PathPrefix+ns+"/gh", bytes.NewReader(d.body))
		for k, v := range d.header {
			req.Header[k] = v
		}
		rec := httptest.NewRecorder()
		began := time.Now()
		f.h.ServeHTTP(rec, req)
		lat = append(lat, time.Since(began))
		if rec.Code != http.StatusAccepted {
			b.Fatalf("delivery %d: %d %s", i, rec.Code, rec.Body)
		}
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)*50/100].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[min(len(lat)-1, len(lat)*99/100)].Microseconds()), "p99-µs")
}

// fakeTasks stands in for the API server's Task creation (named fake: it
// keeps names only), so the benchmark times the listener alone.
type fakeTasks struct {
	mu   sync.Mutex
	made map[string]bool
}

func (f *fakeTasks) create(_ context.Context, _ client.WithWatch, obj client.Object, _ ...client.CreateOption) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	key := obj.GetNamespace() + "/" + obj.GetName()
	if f.made[key] {
		return apierrors.NewAlreadyExists(dotsv1.GroupVersion.WithResource("tasks").GroupResource(), obj.GetName())
	}
	f.made[key] = true
	return nil
}
