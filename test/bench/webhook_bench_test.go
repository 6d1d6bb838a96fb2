package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/invisible-dots/invisible-dots/internal/home"
	"github.com/invisible-dots/invisible-dots/internal/hooks"
)

var (
	webhooksGVR = schema.GroupVersionResource{Group: "dots.invisible.dev", Version: "v1alpha1", Resource: "webhooks"}
	secretsGVR  = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
)

const (
	// webhookRate is the deliveries a second the bench sends
	// (BENCH_WEBHOOK_RATE), spread over webhookCount Webhooks (each within
	// the listener's own rate limit up to 200 a second).
	webhookRate  = 100
	webhookCount = 10
	// webhookDeliveries is how many it sends (BENCH_WEBHOOK_DELIVERIES).
	webhookDeliveries = 2000
	webhookSecret     = "bench-secret-0123456789abcdef"
	webhookNS         = "bench-hooks"
)

// BenchmarkWebhookAccept runs invisible-dots server with its webhooks
// listener on, and sends signed deliveries (GitHub's scheme) at
// webhookRate a second, each on a schedule of its own (an open loop: a slow
// answer does not slow the senders), and reports the time from a
// delivery's due time to its 202, p50 and p99: each is a Task made through the
// API server, on kine, on PostgreSQL. Run it once: -benchtime=1x.
func BenchmarkWebhookAccept(b *testing.B) {
	bin := os.Getenv(envBinary)
	if bin == "" {
		bin = filepath.Join("..", "..", "bin", "invisible-dots")
	}
	if _, err := os.Stat(bin); err != nil {
		b.Fatalf("no invisible-dots binary at %s (%v): run `make build` first, or set %s", bin, err, envBinary)
	}
	n := positiveEnv(b, "BENCH_WEBHOOK_DELIVERIES", webhookDeliveries)
	perSecond := positiveEnv(b, "BENCH_WEBHOOK_RATE", webhookRate)
	root, err := os.MkdirTemp("", "idbench-hooks-")
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
	hooksAddr, err := freeAddress()
	if err != nil {
		b.Fatal(err)
	}
	logPath := filepath.Join(root, "server.log")
	srv, err := startServer(bin, h, addr, logPath, hooks.EnvListen+"="+hooksAddr)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		_, _ = srv.stop(stopTimeout)
		if b.Failed() {
			b.Logf("the home and the server log are kept in %s", root)
			return
		}
		_ = os.RemoveAll(root)
	}()
	ctx := context.Background()
	if _, err := srv.waitReady(ctx, startTimeout); err != nil {
		b.Fatal(err)
	}
	client, err := srv.client()
	if err != nil {
		b.Fatal(err)
	}
	if err := createNamespace(ctx, client, webhookNS); err != nil {
		b.Fatal(err)
	}
	if _, err := client.Resource(dotsGVR).Namespace(webhookNS).Create(ctx, newDot(webhookNS, "hooked"), metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	var urls []string
	for i := range webhookCount {
		name := fmt.Sprintf("hook-%d", i)
		wh := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "dots.invisible.dev/v1alpha1", "kind": "Webhook",
			"metadata": map[string]any{"name": name, "namespace": webhookNS},
			"spec": map[string]any{
				"dotName": "hooked", "signature": "github",
				"secretRef": map[string]any{"name": name + "-webhook"},
				"task":      map[string]any{"description": "Look at {{.n}} of {{.repository.full_name}}"},
			},
		}}
		if _, err := client.Resource(webhooksGVR).Namespace(webhookNS).Create(ctx, wh, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		sec := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "Secret",
			"metadata":   map[string]any{"name": name + "-webhook", "namespace": webhookNS},
			"stringData": map[string]any{"secret": webhookSecret},
		}}
		if _, err := client.Resource(secretsGVR).Namespace(webhookNS).Create(ctx, sec, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		urls = append(urls, hooks.URL("http://"+hooksAddr, webhookNS, name))
	}
	httpc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 200}}
	send := func(i int, id string) (time.Duration, int, error) {
		body := fmt.Appendf(nil, `{"n":%d,"repository":{"full_name":"acme/bench"}}`, i)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, urls[i%len(urls)], bytes.NewReader(body))
		if err != nil {
			return 0, 0, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Hub-Signature-256", hooks.SignGitHub([]byte(webhookSecret), body))
		req.Header.Set("X-GitHub-Delivery", id)
		began := time.Now()
		resp, err := httpc.Do(req)
		if err != nil {
			return 0, 0, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return time.Since(began), resp.StatusCode, nil
	}
	// Warm up: the listener's cache of Webhooks and their secrets, the
	// connections (not counted).
	for i := range webhookCount {
		if _, code, err := send(i, fmt.Sprintf("warm-%d", i)); err != nil || code != http.StatusAccepted {
			b.Fatalf("warm-up delivery: %d, %v; the server log %s ends:\n%s", code, err, logPath, srv.logTail(30))
		}
	}

	b.ResetTimer()
	for range b.N {
		lat := make([]time.Duration, n)
		codes := map[int]int{}
		var (
			mu   sync.Mutex
			wg   sync.WaitGroup
			errs []error
		)
		// Each delivery is sent at its own time on the schedule, late ones at
		// once (no tick dropped), and timed from when it was due: a sender
		// held back by a slow machine does not hide the wait.
		interval := time.Second / time.Duration(perSecond)
		var began time.Time
		taskCreates := serverSide{Verb: "POST", Resource: "tasks", StoreOp: "create", Group: "dots.invisible.dev"}
		server, err := srv.measure(ctx, "webhooks", taskCreates, func() error {
			began = time.Now()
			for i := range n {
				due := began.Add(time.Duration(i) * interval)
				time.Sleep(time.Until(due))
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, code, err := send(i, fmt.Sprintf("bench-%d", i))
					took := time.Since(due)
					mu.Lock()
					defer mu.Unlock()
					lat[i] = took
					codes[code]++
					if err != nil {
						errs = append(errs, err)
					}
				}()
			}
			wg.Wait()
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		took := time.Since(began)
		if len(errs) > 0 || codes[http.StatusAccepted] != n {
			b.Fatalf("of %d deliveries: answers %v, %d errors (first: %v)", n, codes, len(errs), errs)
		}
		p50, p99 := percentile(lat, 50), percentile(lat, 99)
		b.ReportMetric(ms(p50), "p50-ms")
		b.ReportMetric(ms(p99), "p99-ms")
		b.ReportMetric(float64(n)/took.Seconds(), "answered/s")
		fmt.Printf("\nwebhook accept (signed delivery to 202, one Task made), %d deliveries at %d/s over %d Webhooks (%.1f/s from the first send to the last answer):\n  p50 %.1f ms, p99 %.1f ms, max %.1f ms\n",
			n, perSecond, webhookCount, float64(n)/took.Seconds(), ms(p50), ms(p99), ms(percentile(lat, 100)))
		// The API server's share: its own time for the Task creates, and
		// its store's (histograms, so to a bucket's precision).
		fmt.Printf("  the API server's Task creates (its histograms): p50 %.1f ms, p99 %.1f ms; its store's creates p99 %.1f ms (%.0f observed)\n",
			1000*server.Request.quantile(0.5), 1000*server.Request.quantile(0.99), 1000*server.Store.quantile(0.99), server.Request.count)
		// What each delivery cost the store: its Task, and the writes of
		// the controllers it woke.
		fmt.Printf("  the API server's writes during the load: %s\n", server.writesLine(float64(n)))
	}
	b.StopTimer()
	list, err := client.Resource(dotsGVR.GroupVersion().WithResource("tasks")).Namespace(webhookNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	// One per delivery id: a later round sends the same ids, and makes none.
	if want := n + webhookCount; len(list.Items) != want {
		b.Errorf("%d Tasks made; want %d", len(list.Items), want)
	}
}
