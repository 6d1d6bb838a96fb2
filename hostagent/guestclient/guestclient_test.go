package guestclient

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

const token = "0123456789abcdef0123456789abcdef"

// guest is a test listener: it proves with proofToken (a different token
// plays a foreign listener) and records every Authorization header it saw.
type guest struct {
	mu         sync.Mutex
	proofs     int
	authSeen   []string
	proofToken string
	proofBody  string // when set, answered instead of the proof
	// proofShape, when set, is a format with one %s for the right proof:
	// the proof is right, the answer around it is not the protocol's.
	proofShape string
	// answer and answerStatus are what GET /v1/agent/answer says.
	answer       string
	answerStatus int
}

func (g *guest) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+protocol.PathProof, func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		g.proofs++
		g.mu.Unlock()
		if g.proofBody != "" {
			w.Write([]byte(g.proofBody))
			return
		}
		if g.proofShape != "" {
			fmt.Fprintf(w, g.proofShape, protocol.ComputeProof(g.proofToken, r.URL.Query().Get(protocol.QueryNonce)))
			return
		}
		json.NewEncoder(w).Encode(protocol.ProofResponse{Proof: protocol.ComputeProof(g.proofToken, r.URL.Query().Get(protocol.QueryNonce))})
	})
	record := func(r *http.Request) bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.authSeen = append(g.authSeen, r.Header.Get("Authorization"))
		return r.Header.Get("Authorization") == "Bearer "+token
	}
	mux.HandleFunc("GET "+protocol.PathHealth, func(w http.ResponseWriter, r *http.Request) {
		if !record(r) {
			w.WriteHeader(401)
			return
		}
		json.NewEncoder(w).Encode(protocol.HealthResponse{Agentd: protocol.AgentdOK, Agent: json.RawMessage("null"), UptimeS: 7})
	})
	mux.HandleFunc("GET "+protocol.PathSystem, func(w http.ResponseWriter, r *http.Request) {
		if !record(r) {
			w.WriteHeader(401)
			return
		}
		json.NewEncoder(w).Encode(protocol.SystemResponse{Hostname: "helper", CPUs: 2, MemTotalBytes: 1 << 30})
	})
	mux.HandleFunc("POST "+protocol.PathPoweroff, func(w http.ResponseWriter, r *http.Request) {
		record(r)
		w.WriteHeader(http.StatusAccepted)
		json.NewEncoder(w).Encode(protocol.PoweroffResponse{Status: protocol.PoweroffStatus})
	})
	mux.HandleFunc("GET "+protocol.PathFiles, func(w http.ResponseWriter, r *http.Request) {
		record(r)
		w.WriteHeader(http.StatusForbidden)
		json.NewEncoder(w).Encode(protocol.ErrorResponse{Error: protocol.ErrOutsideHome, Message: "/etc is outside /home/dot"})
	})
	mux.HandleFunc(protocol.PathAgentPrefix+"answer", func(w http.ResponseWriter, r *http.Request) {
		record(r)
		w.WriteHeader(cmp.Or(g.answerStatus, http.StatusOK))
		w.Write([]byte(g.answer))
	})
	mux.HandleFunc(protocol.PathAgentPrefix+"health", func(w http.ResponseWriter, r *http.Request) {
		record(r)
		w.Write([]byte(`{"status":"ok"}`))
	})
	return mux
}

func start(t *testing.T, g *guest) Target {
	t.Helper()
	srv := httptest.NewServer(g.handler())
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	var p int
	json.Unmarshal([]byte(port), &p)
	start, boot := self(t)
	return Target{Port: p, PID: os.Getpid(), Token: token, StartTicks: start, BootID: boot} // the listener is this process's
}

func TestProvenGuest(t *testing.T) {
	ctx := context.Background()
	g := &guest{proofToken: token}
	tgt := start(t, g)
	c := New()
	for i := 0; i < 3; i++ {
		h, err := c.Health(ctx, tgt)
		if err != nil {
			t.Fatalf("Health() = %v", err)
		}
		if h.Agentd != protocol.AgentdOK || h.UptimeS != 7 {
			t.Errorf("Health() = %+v", h)
		}
	}
	if g.proofs != 1 {
		t.Errorf("proof asked %d times for 3 calls on a kept-alive connection, want 1", g.proofs)
	}
	if s, err := c.System(ctx, tgt); err != nil || s.Hostname != "helper" || s.CPUs != 2 {
		t.Errorf("System() = %+v, %v", s, err)
	}
	if err := c.Poweroff(ctx, tgt); err != nil {
		t.Errorf("Poweroff() = %v", err)
	}
	var agent map[string]string
	if err := c.Agent(ctx, tgt, http.MethodGet, "/health", nil, &agent); err != nil || agent["status"] != "ok" {
		t.Errorf("Agent(health) = %v, %v", agent, err)
	}

	// Another pid on the same port is another QEMU: proven again. Its
	// stand-in is this process too, which the listener rule rightly
	// refuses under another pid (TestRelayedProofIsRefused is the rule's):
	// here it is the pool that is under test.
	other := tgt
	other.PID++
	c.ListenerRule = func(Target) error { return nil }
	if _, err := c.Health(ctx, other); err != nil {
		t.Fatal(err)
	}
	if g.proofs != 2 {
		t.Errorf("proof asked %d times after the pid changed, want 2", g.proofs)
	}
}

func TestUnprovenListenerNeverSeesToken(t *testing.T) {
	tests := map[string]struct {
		reason string
		g      *guest
	}{
		"other token":  {"a guest of another Dot (or a replay) proves with its own token", &guest{proofToken: "ffffffffffffffffffffffffffffffff"}},
		"not json":     {"a foreign HTTP server answers something else", &guest{proofBody: "<html>hello</html>"}},
		"empty proof":  {"a listener that answers without a proof", &guest{proofBody: `{"proof":""}`}},
		"replay proof": {"a fixed proof cannot match a fresh nonce", &guest{proofBody: `{"proof":"` + protocol.ComputeProof(token, "00") + `"}`}},
		"proof in another case": {"the answer is read strictly: a key in another case is not the protocol's",
			&guest{proofToken: token, proofShape: `{"Proof":"%s"}`}},
		"proof with more": {"the answer is read strictly: a field the protocol does not have",
			&guest{proofToken: token, proofShape: `{"proof":"%s","relayed_by":"x"}`}},
		"proof over the limit": {"the answer is read strictly: its size is bounded",
			&guest{proofToken: token, proofShape: `{"proof":"%s"}` + strings.Repeat(" ", 8192)}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			tgt := start(t, tc.g)
			c := New()
			_, err := c.Health(context.Background(), tgt)
			if !errors.Is(err, ErrGuestUnproven) {
				t.Fatalf("%s: Health() = %v, want ErrGuestUnproven", tc.reason, err)
			}
			if strings.Contains(err.Error(), token) {
				t.Errorf("the error quotes the token: %v", err)
			}
			if diff := gocmp.Diff([]string(nil), tc.g.authSeen); diff != "" {
				t.Errorf("%s: the listener saw Authorization headers (-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}

func TestRawTCPListenerNeverSeesToken(t *testing.T) {
	// A process that is not HTTP at all: it reads what it is sent and
	// answers garbage. Whatever the client wrote must not hold the token.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan string, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		buf := make([]byte, 4096)
		n, _ := conn.Read(buf)
		conn.Write([]byte("SSH-2.0-OpenSSH_9.2\r\n"))
		got <- string(buf[:n])
	}()
	c := New()
	start, boot := self(t)
	_, err = c.Health(context.Background(), Target{Port: ln.Addr().(*net.TCPAddr).Port, PID: os.Getpid(), Token: token, StartTicks: start, BootID: boot})
	if !errors.Is(err, ErrGuestUnproven) {
		t.Fatalf("Health() against a non-HTTP listener = %v, want ErrGuestUnproven", err)
	}
	if sent := <-got; strings.Contains(sent, token) || strings.Contains(sent, "Authorization") {
		t.Errorf("the client sent the token to an unproven listener: %q", sent)
	}
}

func TestStatusError(t *testing.T) {
	tgt := start(t, &guest{proofToken: token})
	c := New()
	err := c.DoJSON(context.Background(), tgt, http.MethodGet, protocol.PathFiles+"?path=/etc/passwd", nil, nil)
	var se *StatusError
	if !errors.As(err, &se) {
		t.Fatalf("DoJSON() = %v, want a *StatusError", err)
	}
	want := &StatusError{Method: "GET", Path: protocol.PathFiles + "?path=/etc/passwd", Status: 403, Code: protocol.ErrOutsideHome, Message: "/etc is outside /home/dot"}
	if diff := gocmp.Diff(want, se); diff != "" {
		t.Errorf("StatusError mismatch (-want +got):\n%s", diff)
	}
}

func TestClosingListenerIsNotAnswering(t *testing.T) {
	// What QEMU's forward does while the guest is booting: accept, then
	// close (or reset) without a byte.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	start, boot := self(t)
	_, err = New().Health(context.Background(), Target{Port: ln.Addr().(*net.TCPAddr).Port, PID: os.Getpid(), Token: token, StartTicks: start, BootID: boot})
	if !errors.Is(err, ErrGuestNotAnswering) || errors.Is(err, ErrGuestUnproven) {
		t.Errorf("Health() against a listener that closes at once = %v, want ErrGuestNotAnswering only", err)
	}
}

func TestSilentListenerIsNotAnswering(t *testing.T) {
	// What QEMU's forward also does while the guest is booting: accept and
	// hold the connection without a byte until the guest listens.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	held := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held <- c
		}
	}()
	defer func() {
		ln.Close()
		for {
			select {
			case c := <-held:
				c.Close()
			default:
				return
			}
		}
	}()
	c := New()
	c.ProofTimeout = 200 * time.Millisecond
	start, boot := self(t)
	_, err = c.Health(context.Background(), Target{Port: ln.Addr().(*net.TCPAddr).Port, PID: os.Getpid(), Token: token, StartTicks: start, BootID: boot})
	if !errors.Is(err, ErrGuestNotAnswering) || errors.Is(err, ErrGuestUnproven) {
		t.Errorf("Health() against a listener that holds the connection silently = %v, want ErrGuestNotAnswering only", err)
	}
}

// TestGuestAnswersAreReadStrictly: a guest is untrusted from the host's
// side, so its answers are read as strictly as it reads the host's bodies:
// one JSON value of the route's shape, exact keys, a bounded size. A
// refusal that is not the protocol's keeps its status and no code.
func TestGuestAnswersAreReadStrictly(t *testing.T) {
	route := protocol.PathAgentPrefix + "answer"
	tests := map[string]struct {
		reason   string
		status   int
		answer   string
		want     protocol.Health
		wantErr  string
		wantCode string
	}{
		"the protocol's":   {reason: "an answer of the route's shape", answer: `{"status":"ok","openrouter_configured":true}`, want: protocol.Health{Status: "ok", OpenRouterConfigured: true}},
		"unknown field":    {reason: "a field the protocol does not have", answer: `{"status":"ok","extra":1}`, wantErr: `unknown field "extra"`},
		"another case":     {reason: "a key in another case", answer: `{"Status":"ok"}`, wantErr: `unknown field "Status"`},
		"trailing value":   {reason: "more after the value", answer: `{"status":"ok"} {"status":"starting"}`, wantErr: "more than one JSON value"},
		"over the limit":   {reason: "a bounded size", answer: `{"status":"ok"}` + strings.Repeat(" ", MaxAnswer), wantErr: "over the"},
		"not json":         {reason: "not JSON", answer: `<html>`, wantErr: "not valid JSON"},
		"refusal":          {reason: "the protocol's refusal keeps its code", status: 409, answer: `{"error":"busy","message":"m"}`, wantCode: "busy"},
		"refusal, case":    {reason: "a refusal in another case is not the protocol's: no code", status: 409, answer: `{"Error":"busy"}`},
		"refusal, more":    {reason: "a refusal with more is not the protocol's: no code", status: 409, answer: `{"error":"busy"} {"error":"other"}`},
		"refusal, unknown": {reason: "a refusal with a field the protocol does not have: no code", status: 409, answer: `{"error":"busy","detail":"x"}`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			tgt := start(t, &guest{proofToken: token, answer: tc.answer, answerStatus: tc.status})
			var got protocol.Health
			err := New().Agent(context.Background(), tgt, http.MethodGet, "answer", nil, &got)
			switch {
			case tc.status != 0:
				var se *StatusError
				if !errors.As(err, &se) {
					t.Fatalf("%s: Agent() = %v, want a *StatusError", tc.reason, err)
				}
				if se.Code != tc.wantCode {
					t.Errorf("%s: the refusal's code = %q, want %q", tc.reason, se.Code, tc.wantCode)
				}
			case tc.wantErr != "":
				var ae *AnswerError
				if !errors.As(err, &ae) {
					t.Fatalf("%s: Agent() = %v, want an *AnswerError", tc.reason, err)
				}
				if !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "GET "+route) {
					t.Errorf("%s: Agent() = %q, want it to name GET %s and hold %q", tc.reason, err, route, tc.wantErr)
				}
			default:
				if err != nil {
					t.Fatalf("%s: Agent() = %v", tc.reason, err)
				}
				if diff := gocmp.Diff(tc.want, got); diff != "" {
					t.Errorf("%s: the answer (-want +got):\n%s", tc.reason, diff)
				}
			}
		})
	}
}

// TestForget: forgetting a QEMU by its port and pid (what a kill knows)
// closes the connections proven to it, whatever token and identity they
// were proven with: the next call proves again.
func TestForget(t *testing.T) {
	ctx := context.Background()
	g := &guest{proofToken: token}
	tgt := start(t, g)
	c := New()
	if _, err := c.Health(ctx, tgt); err != nil {
		t.Fatal(err)
	}
	c.Forget(Target{Port: tgt.Port, PID: tgt.PID})
	if _, err := c.Health(ctx, tgt); err != nil {
		t.Fatal(err)
	}
	if got := g.proofCount(); got != 2 {
		t.Errorf("proof asked %d times, want 2: the forgotten connection was used again", got)
	}
}
