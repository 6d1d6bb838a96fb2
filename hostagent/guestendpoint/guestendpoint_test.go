package guestendpoint

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"

	"github.com/invisible-dots/invisible-dots/hostagent/guestclient"
	"github.com/invisible-dots/invisible-dots/hostagent/guestproxy"
)

const controlPlane = "system:serviceaccount:invisible-dots-system:invisible-dots-guest-proxy"

// fakeReviewer stands in for the API server's TokenReview: it knows two
// tokens.
type fakeReviewer struct{}

func (fakeReviewer) Review(_ context.Context, token string) (string, error) {
	switch token {
	case "control-plane-token":
		return controlPlane, nil
	case "host-b-token":
		return "system:serviceaccount:invisible-dots-system:invisible-dots-host-b", nil
	}
	return "", errNotVouched
}

// fakeGuests stands in for the agent's registry: one guest, default/dot,
// which echoes what it was asked; team/slow is not answering.
type fakeGuests struct{ asked []string }

func (f *fakeGuests) Host() string { return "host-a" }

func (f *fakeGuests) Do(_ context.Context, c types.NamespacedName, method, pathAndQuery string, body io.Reader, header http.Header) (*http.Response, error) {
	switch c.String() {
	case "default/dot":
	case "team/slow":
		return nil, fmt.Errorf("GET %s: %w", pathAndQuery, guestclient.ErrGuestNotAnswering)
	default:
		return nil, guestproxy.ErrNoGuest
	}
	var b []byte
	if body != nil {
		b, _ = io.ReadAll(body)
	}
	f.asked = append(f.asked, fmt.Sprintf("%s %s %s %s", method, pathAndQuery, header.Get("Content-Type"), b))
	rec := httptest.NewRecorder()
	rec.Header().Set("Content-Type", "application/json")
	rec.WriteHeader(http.StatusTeapot)
	fmt.Fprintf(rec, `{"echo":%q}`, pathAndQuery)
	return rec.Result(), nil
}

func serve(t *testing.T) (*httptest.Server, *fakeGuests, Certificate) {
	t.Helper()
	cert, err := NewCertificate("host-a", []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	g := &fakeGuests{}
	srv := httptest.NewUnstartedServer(&Server{Guests: g, Reviewer: fakeReviewer{}, ControlPlane: controlPlane, Log: logr.Discard()})
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert.TLS}, MinVersion: tls.VersionTLS13}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv, g, cert
}

func call(t *testing.T, c *http.Client, method, url, token, body string) (*http.Response, string) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, url, r)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// Only the control plane is served, with the guest's own answer; anyone
// else is refused before a guest is asked.
func TestOnlyTheControlPlaneReachesAGuest(t *testing.T) {
	srv, g, cert := serve(t)
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: PinnedTLS(cert.SHA256)}}
	url := srv.URL + PathPrefix + "default/dot/v1/files/list?path=%2Fhome%2Fdot"

	for _, tc := range []struct {
		name, token string
		want        int
	}{
		{"no token", "", http.StatusUnauthorized},
		{"a token the API server does not vouch for", "forged", http.StatusUnauthorized},
		{"another host's identity", "host-b-token", http.StatusForbidden},
	} {
		if resp, _ := call(t, c, http.MethodGet, url, tc.token, ""); resp.StatusCode != tc.want {
			t.Errorf("%s: %d; want %d", tc.name, resp.StatusCode, tc.want)
		}
	}
	if len(g.asked) != 0 {
		t.Fatalf("a refused caller reached the guest: %q", g.asked)
	}

	resp, body := call(t, c, http.MethodGet, url, "control-plane-token", "")
	if resp.StatusCode != http.StatusTeapot || body != `{"echo":"/v1/files/list?path=%2Fhome%2Fdot"}` || resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("the control plane got %d %q (%s); want the guest's own answer", resp.StatusCode, body, resp.Header.Get("Content-Type"))
	}
	resp, _ = call(t, c, http.MethodPost, srv.URL+PathPrefix+"default/dot/v1/agent/browser-identities", "control-plane-token", `{"name":"x"}`)
	if resp.StatusCode != http.StatusTeapot || g.asked[len(g.asked)-1] != `POST /v1/agent/browser-identities application/json {"name":"x"}` {
		t.Errorf("a POST reached the guest as %q (%d)", g.asked[len(g.asked)-1], resp.StatusCode)
	}
}

// A request that reaches no guest says why, in words the control plane
// turns back into the in-process error of the same meaning.
func TestAnUnreachedGuestSaysWhy(t *testing.T) {
	srv, _, cert := serve(t)
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: PinnedTLS(cert.SHA256)}}
	for path, want := range map[string]error{
		"other/dot/v1/screenshot": guestproxy.ErrNoGuest,
		"team/slow/v1/screenshot": guestclient.ErrGuestNotAnswering,
	} {
		resp, _ := call(t, c, http.MethodGet, srv.URL+PathPrefix+path, "control-plane-token", "")
		why := resp.Header.Get(HeaderUnreached)
		if !errors.Is(Unreached(why), want) {
			t.Errorf("%s: %d %s=%q; want %v", path, resp.StatusCode, HeaderUnreached, why, want)
		}
	}
	if resp, _ := call(t, c, http.MethodGet, srv.URL+"/guests/default/dot", "control-plane-token", ""); resp.StatusCode != http.StatusNotFound {
		t.Errorf("a path without a route: %d; want 404", resp.StatusCode)
	}
}

// The control plane trusts exactly the certificate the Host publishes.
func TestTheCertificateIsPinned(t *testing.T) {
	srv, _, _ := serve(t)
	other, err := NewCertificate("host-b", []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: PinnedTLS(other.SHA256)}}
	req, _ := http.NewRequest(http.MethodGet, srv.URL+PathPrefix+"default/dot/v1/screenshot", nil)
	req.Header.Set("Authorization", "Bearer control-plane-token")
	if _, err := c.Do(req); err == nil || !strings.Contains(err.Error(), "not the one its Host publishes") {
		t.Fatalf("a certificate other than the published one: %v; want the connection refused, saying so", err)
	}
}
