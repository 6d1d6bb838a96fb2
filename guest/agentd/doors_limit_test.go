package agentd

import (
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

func TestHostIsServedPastAFloodOfConnections(t *testing.T) {
	const max = 8
	addr, sock := startRun(t, func(o *Options) { o.MaxConns, o.MaxLocalConns = max, max })
	// Five times the cap of connections that send nothing, on both doors.
	for range 5 * max {
		for _, d := range [][2]string{{"tcp", addr}, {"unix", sock}} {
			c, err := net.Dial(d[0], d[1])
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
		}
	}
	time.Sleep(200 * time.Millisecond)
	cl := &http.Client{Timeout: 2 * time.Second}
	for i := range 10 {
		req, _ := http.NewRequest("GET", "http://"+addr+protocol.PathHealth, nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		start := time.Now()
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatalf("health %d behind %d silent connections (cap %d): %v", i, 5*max, max, err)
		}
		resp.Body.Close()
		if d := time.Since(start); resp.StatusCode != 200 || d > time.Second {
			t.Errorf("health %d = %d in %v", i, resp.StatusCode, d)
		}
	}
	local := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{Dial: func(_, _ string) (net.Conn, error) { return net.Dial("unix", sock) }}}
	resp, err := local.Get("http://agentd" + protocol.PathSystem)
	if err != nil {
		t.Fatalf("the engine's door behind %d silent connections: %v", 5*max, err)
	}
	resp.Body.Close()
}
