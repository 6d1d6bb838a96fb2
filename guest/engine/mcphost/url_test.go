package mcphost

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// TestURLServers reaches a server over streamable HTTP, and one whose URL
// ends in /sse over SSE, each with its headers and its secret header on
// every request.
func TestURLServers(t *testing.T) {
	const secret = "Bearer url-secret-991"
	var mu sync.Mutex
	seen := map[string][]string{} // path -> Authorization and X-Client values seen
	record := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			seen[r.URL.Path] = append(seen[r.URL.Path], r.Header.Get("Authorization")+"|"+r.Header.Get("X-Client"))
			mu.Unlock()
			next.ServeHTTP(w, r)
		})
	}
	getServer := func(*http.Request) *sdk.Server { return testServer(func() {}) }
	mux := http.NewServeMux()
	mux.Handle("/mcp", record(sdk.NewStreamableHTTPHandler(getServer, nil)))
	mux.Handle("/sse", record(sdk.NewSSEHandler(getServer, nil)))
	hs := httptest.NewServer(mux)
	defer hs.Close()

	s := NewServers(ServersOptions{ToolName: modelName, Launcher: Launcher{HTTPClient: hs.Client()}})
	defer s.Close()
	entry := func(path string) protocol.MCPServerConfig {
		return protocol.MCPServerConfig{URL: hs.URL + path, Headers: map[string]string{"X-Client": "dots"}, Secrets: []string{"Authorization"}}
	}
	secrets := map[string]map[string]string{"web": {"Authorization": secret}, "old": {"Authorization": secret}}
	s.Apply(config(map[string]protocol.MCPServerConfig{"web": entry("/mcp"), "old": entry("/sse")}, nil), secrets)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s.Ready(ctx)
	want := []protocol.MCPServerStatus{{Name: "old", State: protocol.MCPConnected, Tools: 5}, {Name: "web", State: protocol.MCPConnected, Tools: 5}}
	if d := cmp.Diff(want, s.Status()); d != "" {
		t.Fatalf("status (-want +got):\n%s", d)
	}
	for _, name := range []string{"mcp__web__echo", "mcp__old__echo"} {
		if got := s.Call(ctx, name, json.RawMessage(`{"text":"over http"}`)); !got.OK || got.Text != "echo: over http" {
			t.Errorf("%s = %+v", name, got)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, path := range []string{"/mcp", "/sse"} {
		if len(seen[path]) == 0 {
			t.Errorf("no request reached %s", path)
		}
		for _, h := range seen[path] {
			if h != secret+"|dots" {
				t.Errorf("a request to %s carried %q, want the secret header and X-Client", path, h)
			}
		}
	}
}
