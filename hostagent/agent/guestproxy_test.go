package agent

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/invisible-dots/invisible-dots/hostagent/guestclient"
	"github.com/invisible-dots/invisible-dots/hostagent/guestproxy"
	"github.com/invisible-dots/invisible-dots/hostagent/guests"
)

// recordingStreamer is a fake guest client: it answers every request 200
// and remembers the target and path of each.
type recordingStreamer struct{ got []string }

func (r *recordingStreamer) Request(_ context.Context, t guestclient.Target, method, pathAndQuery string, _ io.Reader, _ http.Header) (*http.Response, error) {
	r.got = append(r.got, t.String()+" "+method+" "+pathAndQuery)
	return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader("ok"))}, nil
}

func TestProxyFollowsTheRegistry(t *testing.T) {
	ctx := context.Background()
	rec := &recordingStreamer{}
	reg := &guests.Registry{}
	g := &guestProxy{host: "host-1", guest: rec, guests: reg}
	key := types.NamespacedName{Namespace: "team-a", Name: "helper"}
	if _, err := g.Do(ctx, key, http.MethodGet, "/v1/screenshot", nil, nil); !errors.Is(err, guestproxy.ErrNoGuest) {
		t.Errorf("before the guest link proved the guest: %v; want ErrNoGuest", err)
	}
	target := guestclient.Target{Port: 40001, PID: 77, Token: "t0ken-t0ken-t0ken-t0ken"}
	reg.Prove(key, target)
	resp, err := g.Do(ctx, key, http.MethodGet, "/v1/files/list?path=%2Fhome%2Fdot", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if want := "127.0.0.1:40001 (pid 77) GET /v1/files/list?path=%2Fhome%2Fdot"; len(rec.got) != 1 || rec.got[0] != want {
		t.Errorf("asked %q; want %q", rec.got, want)
	}
	// Another Dot's guest is not this one's.
	if _, err := g.Do(ctx, types.NamespacedName{Namespace: "team-b", Name: "helper"}, http.MethodGet, "/v1/screenshot", nil, nil); !errors.Is(err, guestproxy.ErrNoGuest) {
		t.Errorf("another Dot: %v; want ErrNoGuest", err)
	}
	// The computer stopped: the link records no guest, and it is gone.
	reg.Prove(key, guestclient.Target{})
	if _, err := g.Do(ctx, key, http.MethodGet, "/v1/screenshot", nil, nil); !errors.Is(err, guestproxy.ErrNoGuest) {
		t.Errorf("after the guest went: %v; want ErrNoGuest", err)
	}
}
