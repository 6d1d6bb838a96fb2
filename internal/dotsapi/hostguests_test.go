package dotsapi

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/hostagent/guestendpoint"
	"github.com/invisible-dots/invisible-dots/hostagent/guestproxy"
	"github.com/invisible-dots/invisible-dots/internal/hostidentity"
	"github.com/invisible-dots/invisible-dots/internal/scheme"
)

// fakeTokenReviewer stands in for the API server's TokenReview at the
// agent: it vouches for the fake client's token as the control plane's.
type fakeTokenReviewer struct{}

func (fakeTokenReviewer) Review(_ context.Context, token string) (string, error) {
	if token == "fake-token" {
		return hostidentity.GuestProxyUser, nil
	}
	return "", errors.New("not vouched")
}

// agentRegistry stands in for an agent's guests: default/dot answers.
type agentRegistry struct{}

func (agentRegistry) Host() string { return "host-b" }
func (agentRegistry) Do(_ context.Context, c types.NamespacedName, method, pathAndQuery string, _ io.Reader, _ http.Header) (*http.Response, error) {
	if c.String() != "default/dot" {
		return nil, guestproxy.ErrNoGuest
	}
	return fakeAnswer(http.StatusOK, `{"asked":"`+method+" "+pathAndQuery+`"}`), nil
}

// startAgentEndpoint serves agentRegistry's guests at a real guest
// endpoint over TLS until the test ends, as host-b's agent.
func startAgentEndpoint(tb testing.TB) (*httptest.Server, guestendpoint.Certificate) {
	tb.Helper()
	cert, err := guestendpoint.NewCertificate("host-b", []string{"127.0.0.1"})
	if err != nil {
		tb.Fatal(err)
	}
	agent := httptest.NewUnstartedServer(&guestendpoint.Server{Guests: agentRegistry{}, Reviewer: fakeTokenReviewer{},
		ControlPlane: hostidentity.GuestProxyUser, Log: logr.Discard()})
	agent.TLS = &tls.Config{Certificates: []tls.Certificate{cert.TLS}}
	// A handshake the client refuses (a forged digest) is not news.
	agent.Config.ErrorLog = log.New(io.Discard, "", 0)
	agent.StartTLS()
	tb.Cleanup(agent.Close)
	return agent, cert
}

// The control plane reaches a guest of another host through that host's
// agent, at the address and with the certificate its Host publishes; what
// goes wrong on the way names the host.
func TestHostGuestsReachAGuestThroughItsHostsAgent(t *testing.T) {
	agent, cert := startAgentEndpoint(t)
	other, err := guestendpoint.NewCertificate("host-c", []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	host := func(name string, ep *dotsv1.HostGuestEndpoint) *dotsv1.Host {
		return &dotsv1.Host{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: dotsv1.HostStatus{GuestEndpoint: ep}}
	}
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: dotsv1.SystemNamespace, Name: hostidentity.GuestProxyServiceAccount}},
		host("host-b", &dotsv1.HostGuestEndpoint{URL: agent.URL, CertificateSHA256: cert.SHA256}),
		host("host-old", nil),
		host("host-forged", &dotsv1.HostGuestEndpoint{URL: agent.URL, CertificateSHA256: other.SHA256}),
		host("host-down", &dotsv1.HostGuestEndpoint{URL: "https://127.0.0.1:1", CertificateSHA256: cert.SHA256}),
	).WithStatusSubresource(&dotsv1.Host{}).Build()
	g := &HostGuests{Reader: c, Writer: c}
	dot := types.NamespacedName{Namespace: "default", Name: "dot"}
	ctx := context.Background()

	resp, err := g.Do(ctx, "host-b", dot, http.MethodGet, "/v1/files/list?path=x", nil, nil)
	if err != nil {
		t.Fatalf("Do through host-b's agent: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != `{"asked":"GET /v1/files/list?path=x"}` {
		t.Errorf("the guest's answer came back as %d %s", resp.StatusCode, body)
	}
	if _, err := g.Do(ctx, "host-b", types.NamespacedName{Namespace: "default", Name: "gone"}, http.MethodGet, "/v1/screenshot", nil, nil); !errors.Is(err, guestproxy.ErrNoGuest) {
		t.Errorf("a Computer the agent has no guest of: %v; want %v", err, guestproxy.ErrNoGuest)
	}
	for name, want := range map[string]string{
		"host-none":   "there is no such Host",
		"host-old":    "has not published a guest endpoint",
		"host-forged": "not the one its Host publishes",
		"host-down":   "did not answer",
	} {
		_, err := g.Do(ctx, name, dot, http.MethodGet, "/v1/screenshot", nil, nil)
		if !errors.Is(err, ErrHostUnreachable) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v; want host_unreachable naming the host and %q", name, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "fake-token") {
			t.Errorf("%s: the error holds the token: %v", name, err)
		}
	}
}

// BenchmarkGuestRoute is the cost of the one path: a guest request through
// the host agent's HTTPS endpoint (pinned TLS, a cached token review)
// against the agent's registry asked in process, as before, with the same
// guest answering from memory. It reports the median and the 99th
// percentile of each.
//
//	go test -run '^$' -bench GuestRoute -benchtime 2000x ./internal/dotsapi/
func BenchmarkGuestRoute(b *testing.B) {
	agent, cert := startAgentEndpoint(b)
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: dotsv1.SystemNamespace, Name: hostidentity.GuestProxyServiceAccount}},
		&dotsv1.Host{ObjectMeta: metav1.ObjectMeta{Name: "host-b"}, Status: dotsv1.HostStatus{GuestEndpoint: &dotsv1.HostGuestEndpoint{URL: agent.URL, CertificateSHA256: cert.SHA256}}},
	).WithStatusSubresource(&dotsv1.Host{}).Build()
	remote := &HostGuests{Reader: c, Writer: c}
	dot := types.NamespacedName{Namespace: "default", Name: "dot"}
	ctx := context.Background()
	paths := map[string]func() (*http.Response, error){
		"in-process": func() (*http.Response, error) {
			return agentRegistry{}.Do(ctx, dot, http.MethodGet, "/v1/files/list?path=x", nil, nil)
		},
		"through-agent-endpoint": func() (*http.Response, error) {
			return remote.Do(ctx, "host-b", dot, http.MethodGet, "/v1/files/list?path=x", nil, nil)
		},
	}
	for _, name := range []string{"in-process", "through-agent-endpoint"} {
		do := paths[name]
		b.Run(name, func(b *testing.B) {
			took := make([]time.Duration, 0, b.N)
			for range b.N {
				start := time.Now()
				resp, err := do()
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				took = append(took, time.Since(start))
			}
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(took[len(took)*99/100].Microseconds()), "p99-µs")
		})
	}
}
