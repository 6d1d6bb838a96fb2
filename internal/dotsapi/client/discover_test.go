package client

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
)

const discoveryPath = "/api/v1/namespaces/invisible-dots-system/configmaps/" + wire.DiscoveryConfigMap

// fakeCluster is an API server that answers the discovery ConfigMap with
// configMap (a status code, and the data when 200) and 404 to anything
// else, as a cluster's API server answers /dots/v1: it stands in for a
// real cluster at the edge of these tests.
type fakeCluster struct {
	*httptest.Server
	status  int
	data    map[string]string
	lookups atomic.Int32
}

func newFakeCluster(t *testing.T, status int, data map[string]string) *fakeCluster {
	f := &fakeCluster{status: status, data: data}
	f.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != discoveryPath {
			http.NotFound(w, r)
			return
		}
		f.lookups.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(f.status)
		if f.status == http.StatusOK {
			_ = json.NewEncoder(w).Encode(map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]string{"name": wire.DiscoveryConfigMap}, "data": f.data})
			return
		}
		reason := map[int]string{http.StatusNotFound: "NotFound", http.StatusForbidden: "Forbidden"}[f.status]
		_ = json.NewEncoder(w).Encode(map[string]any{"apiVersion": "v1", "kind": "Status", "status": "Failure", "code": f.status, "reason": reason, "message": "configmaps \"dots-api\" is " + strings.ToLower(reason)})
	}))
	t.Cleanup(f.Close)
	return f
}

func configOf(s *httptest.Server) *rest.Config {
	return &rest.Config{Host: s.URL, BearerToken: "person-token", TLSClientConfig: rest.TLSClientConfig{CAData: caOf(s)}}
}

func caOf(s *httptest.Server) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw})
}

func TestDiscoveryFollowsThePublishedServer(t *testing.T) {
	var token atomic.Value
	dots := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token.Store(r.Header.Get("Authorization"))
		if r.URL.Path != wire.HealthPath {
			http.NotFound(w, r)
			return
		}
		_ = json.NewEncoder(w).Encode(wire.Health{Status: "ok", Home: "/published"})
	}))
	defer dots.Close()
	cluster := newFakeCluster(t, http.StatusOK, map[string]string{wire.DiscoveryServerKey: dots.URL, wire.DiscoveryCAKey: string(caOf(dots))})
	c, err := New(configOf(cluster.Server))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 3 {
		h, err := c.Health(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if h.Home != "/published" {
			t.Fatalf("answered by %q; want the published server", h.Home)
		}
	}
	if got := token.Load(); got != "Bearer person-token" {
		t.Errorf("the published server got the credential %q; want the kubeconfig's", got)
	}
	if n := cluster.lookups.Load(); n != 1 {
		t.Errorf("the ConfigMap was read %d times for 3 requests; want once", n)
	}

	t.Log("a server that moved is looked up again after a failed connection")
	dots.Close()
	if _, err := c.Health(ctx); err == nil {
		t.Fatal("a closed server answered")
	}
	if _, err := c.Health(ctx); err == nil {
		t.Fatal("a closed server answered")
	}
	if n := cluster.lookups.Load(); n != 2 {
		t.Errorf("the ConfigMap was read %d times after the failure; want again once", n)
	}
}

func TestDiscoveryWithoutAPublishedServer(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		data   map[string]string
		want   []string
	}{
		{"none published", http.StatusNotFound, nil, []string{"does not serve the Dots API", "invisible-dots server --kubeconfig"}},
		{"the ConfigMap is not readable", http.StatusForbidden, nil, []string{"does not serve the Dots API", "could not be read", "config/rbac/dots_api_discovery.yaml"}},
		{"a ConfigMap without a server", http.StatusOK, map[string]string{wire.DiscoveryServerKey: "http://plain"}, []string{"does not say where the Dots API is"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cluster := newFakeCluster(t, tc.status, tc.data)
			c, err := New(configOf(cluster.Server))
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.Health(context.Background())
			if err == nil {
				t.Fatal("answered")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the error %q does not say %q", err, w)
				}
			}
		})
	}
}
