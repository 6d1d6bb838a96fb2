package protocol

import (
	"net/http"
	"testing"
)

// TestErrorCodesAreTheReferences pins every error code the reference names
// for dot-agentd (ref 5.2, and the file codes ref 9.6 passes through) and for
// the engine's routes (ref 5.3) to the reference's own word and status. The
// words are the wire: a host or a guest built from the reference reads them,
// so a rename here is a protocol change, not a refactor.
func TestErrorCodesAreTheReferences(t *testing.T) {
	// dot-agentd names the status where it answers; its handlers' tests
	// (guest/agentd) hold those.
	agentd := []struct{ code, word string }{
		{ErrOutsideHome, "outside_home"},
		{ErrPermissionDenied, "permission_denied"},
		{ErrNotFound, "not_found"},
		{ErrPoweroffFailed, "poweroff_failed"},
		{ErrIsDirectory, "is_a_directory"},
		{ErrNotDirectory, "not_a_directory"},
	}
	for _, c := range agentd {
		if c.code != c.word {
			t.Errorf("dot-agentd's code %q: the reference (5.2, 9.6) says %q", c.code, c.word)
		}
	}
	engine := []struct {
		code, word string
		status     int
	}{
		{ErrInvalidConfig, "invalid_config", http.StatusBadRequest},
		{ErrInvalidSecret, "invalid_secret", http.StatusBadRequest},
		{ErrInvalid, "invalid", http.StatusBadRequest},
		{ErrNotFound, "not_found", http.StatusNotFound},
		{ErrLimit, "limit", http.StatusConflict},
		{ErrNotOpen, "not_open", http.StatusConflict},
		{ErrBusy, "busy", http.StatusServiceUnavailable},
		{ErrCrashed, "crashed", http.StatusBadGateway},
		{ErrFrameFailed, "frame_failed", http.StatusBadGateway},
	}
	for _, c := range engine {
		if c.code != c.word {
			t.Errorf("the engine's code %q: the reference (5.3) says %q", c.code, c.word)
		}
		if got := ErrorStatus(c.code); got != c.status {
			t.Errorf("the engine answers %q with %d: the reference (5.3) says %d", c.code, got, c.status)
		}
	}
	// launch_failed is a tool's answer, never a route's (ref 5.3).
	if ErrLaunchFailed != "launch_failed" {
		t.Errorf("the browser tools' code %q: the reference (5.3) says launch_failed", ErrLaunchFailed)
	}
}
