package openrouter

import (
	"testing"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// TestDefaultBaseURLIsTheHosts: the engine's default and the host's default
// of host.yaml openrouterURL are one URL.
func TestDefaultBaseURLIsTheHosts(t *testing.T) {
	if DefaultBaseURL != protocol.DefaultOpenRouterURL {
		t.Errorf("DefaultBaseURL = %q, protocol.DefaultOpenRouterURL = %q; want the same", DefaultBaseURL, protocol.DefaultOpenRouterURL)
	}
}
