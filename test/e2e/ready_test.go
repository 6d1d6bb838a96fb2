package e2e

// The READY procedure against real QEMU (tcg, the test image with the real
// dot-engine) and the real binary: a Dot applied before any OpenRouter key
// is stored waits, saying which command stores one; `invisible-dots secret
// openrouter` stores it from standard input; the Dot turns READY with
// KeyPushed, ConfigApplied (its generation) and AgentReady. The host's
// openrouterURL points every guest at a stand-in on the host's loopback,
// which sees the key the engine was given.

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/hostagent/guestclient"
	"github.com/invisible-dots/invisible-dots/hostagent/hostconfig"
	"github.com/invisible-dots/invisible-dots/hostagent/qemu"
	"github.com/invisible-dots/invisible-dots/internal/home"
)

// standIn is a stand-in for OpenRouter on the host's loopback: it records
// every request's method, path and Authorization header. With a model it
// answers as OpenRouter does (the model's endpoints, and chat completions
// streamed with their usage.cost); without one it answers 404 to
// everything.
type standIn struct {
	mu    sync.Mutex
	seen  []string
	port  int
	model func(req modelRequest) modelAnswer
}

// modelRequest is what the stand-in reads of a chat completion request.
type modelRequest struct {
	Model    string `json:"model"`
	Messages []struct {
		Role       string `json:"role"`
		Content    any    `json:"content"`
		ToolCallID string `json:"tool_call_id"`
		ToolCalls  []struct {
			Function struct {
				Name      string `json:"name"`
				Arguments string `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
	} `json:"messages"`
}

// lastCall is the name of the newest tool call the model made in the
// conversation, "" when it made none.
func (r modelRequest) lastCall() string {
	for i := len(r.Messages) - 1; i >= 0; i-- {
		if c := r.Messages[i].ToolCalls; len(c) > 0 {
			return c[len(c)-1].Function.Name
		}
	}
	return ""
}

// text is a message's content when it is a string.
func (r modelRequest) text(i int) string {
	s, _ := r.Messages[i].Content.(string)
	return s
}

// modelAnswer is one scripted answer: text, tool calls (name and JSON
// arguments), and what it cost.
type modelAnswer struct {
	Text  string
	Calls [][2]string
	Cost  float64
}

func startStandIn(t testing.TB, model func(req modelRequest) modelAnswer) *standIn {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &standIn{port: l.Addr().(*net.TCPAddr).Port, model: model}
	srv := &http.Server{Handler: http.HandlerFunc(s.serve), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { srv.Close() })
	return s
}

func (s *standIn) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.seen = append(s.seen, r.Method+" "+r.URL.Path+" "+r.Header.Get("Authorization"))
	s.mu.Unlock()
	switch {
	case s.model == nil:
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/api/v1/models/") && strings.HasSuffix(r.URL.Path, "/endpoints"):
		fmt.Fprint(w, `{"data":{"endpoints":[{"name":"Stand-in | m","provider_name":"Stand-in","tag":"stand-in","context_length":100000,"max_completion_tokens":8000}]}}`)
		return
	case r.Method == http.MethodPost && r.URL.Path == "/api/v1/chat/completions":
		var req modelRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Messages) == 0 {
			http.Error(w, `{"error":{"message":"the stand-in cannot read the request"}}`, http.StatusBadRequest)
			return
		}
		s.stream(w, s.model(req))
		return
	}
	http.Error(w, `{"error":{"message":"stand-in"}}`, http.StatusNotFound)
}

// stream writes an answer as OpenRouter's stream does: the text, the tool
// calls, the finish reason, then a last chunk with the usage and its cost.
func (s *standIn) stream(w http.ResponseWriter, a modelAnswer) {
	w.Header().Set("Content-Type", "text/event-stream")
	send := func(v any) {
		b, _ := json.Marshal(v)
		fmt.Fprintf(w, "data: %s\n\n", b)
	}
	delta := func(d map[string]any) map[string]any {
		return map[string]any{"choices": []any{map[string]any{"delta": d}}}
	}
	if a.Text != "" {
		send(delta(map[string]any{"content": a.Text}))
	}
	finish := "stop"
	for i, c := range a.Calls {
		finish = "tool_calls"
		send(delta(map[string]any{"tool_calls": []any{map[string]any{"index": i, "id": fmt.Sprintf("call_%d", i), "type": "function",
			"function": map[string]any{"name": c[0], "arguments": c[1]}}}}))
	}
	send(map[string]any{"choices": []any{map[string]any{"delta": map[string]any{}, "finish_reason": finish}}})
	send(map[string]any{"choices": []any{}, "usage": map[string]any{"prompt_tokens": 10, "completion_tokens": 5, "cost": a.Cost}})
	fmt.Fprint(w, "data: [DONE]\n\n")
}

func (s *standIn) requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.seen...)
}

func TestDotReady(t *testing.T) {
	if testing.Short() {
		t.Skip("boots VMs under QEMU")
	}
	if _, err := qemu.FindBinaries(os.Getenv); err != nil {
		t.Skipf("QEMU is not installed (invisible-dots setup installs it): %v", err)
	}
	h := vmHome(t)
	stand := startStandIn(t, nil)
	if err := hostconfig.Save(h, hostconfig.Config{Accelerator: hostconfig.TCG,
		OpenRouterURL: fmt.Sprintf("http://10.0.2.2:%d/api/v1", stand.port)}); err != nil {
		t.Fatal(err)
	}
	first, second := "e2e-nokey", "e2e-ready"
	for _, n := range []string{first, second} {
		vm := h.VM(home.VMID{Namespace: "default", Name: n})
		t.Cleanup(func() { cvmKillRecorded(vm) })
	}
	srv := startServer(t, h.Root)
	k := cvmKubectl{t: t, s: srv}
	homeEnv := []string{"INVISIBLE_DOTS_HOME=" + h.Root}

	t.Log("doctor says no key is stored, and names the command")
	if row := doctorRow(t, homeEnv, "OpenRouter key stored"); row.Status != "missing" || !strings.Contains(row.Fix, "invisible-dots secret openrouter") {
		t.Errorf("doctor's key row before a key = %+v; want missing, fixed by invisible-dots secret openrouter", row)
	}

	t.Log("a Dot applied before any key is stored: its computer runs, and it waits for a key")
	k.apply(smallDot(first, ""))
	start := time.Now()
	d := k.waitDot(first, vmReadyTimeout, func(d *dotsv1.Dot) bool {
		c := dotCond(d, dotsv1.KeyPushedCondition)
		return d.Status.ComputerState == dotsv1.ComputerRunning && c.Reason == dotsv1.NoKeyReason
	})
	if d.Status.Phase != dotsv1.DotCreating {
		t.Errorf("phase %s while no key is stored; want CREATING", d.Status.Phase)
	}
	if msg := dotCond(d, dotsv1.KeyPushedCondition).Message; !strings.Contains(msg, "invisible-dots secret openrouter") {
		t.Errorf("KeyPushed says %q; want it to name invisible-dots secret openrouter", msg)
	}
	if msg := dotCond(d, dotsv1.ReadyCondition).Message; !strings.Contains(msg, "KeyPushed") {
		t.Errorf("Ready says %q; want it to say it waits for KeyPushed", msg)
	}

	t.Log("the key is taken from standard input only, and must be printable ASCII without spaces")
	if out, err := secretOpenRouter(homeEnv, "", "sk-or-as-an-argument"); err == nil || !strings.Contains(out, "standard input only") {
		t.Errorf("secret openrouter with an argument: %v\n%s; want a refusal naming standard input", err, out)
	}
	if out, err := secretOpenRouter(homeEnv, "sk-or with a space\n"); err == nil || !strings.Contains(out, protocol.OpenRouterKeyRule) || strings.Contains(out, "with a space") {
		t.Errorf("secret openrouter with a space in the key: %v\n%s; want the key rule, without the key", err, out)
	}

	const key = "sk-or-v1-e2e-0123456789abcdef"
	out, err := secretOpenRouter(homeEnv, key+"\n")
	if err != nil || strings.Contains(out, key) {
		t.Fatalf("secret openrouter: %v\n%s", err, out)
	}
	t.Logf("stored: %s", strings.TrimSpace(out))
	if row := doctorRow(t, homeEnv, "OpenRouter key stored"); row.Status != "ok" {
		t.Errorf("doctor's key row after storing = %+v; want ok", row)
	}

	t.Log("the waiting Dot becomes READY: key, configuration of its generation, the engine's health")
	d = k.waitDot(first, 2*time.Minute, readyDot)
	t.Logf("FIGURE apply-to-READY %s (tcg, the key stored on the way)", time.Since(start).Round(time.Millisecond))
	for _, c := range d.Status.Conditions {
		if strings.Contains(c.Message, key) {
			t.Errorf("condition %s carries the key", c.Type)
		}
	}

	t.Log("a Dot applied once the key is stored reaches READY by itself")
	start = time.Now()
	k.apply(smallDot(second, ""))
	k.waitDot(second, vmReadyTimeout, readyDot)
	t.Logf("FIGURE apply-to-READY %s (tcg, key stored before)", time.Since(start).Round(time.Millisecond))

	t.Log("the engine got the host's OpenRouter URL from the seed, and the key over the guest channel")
	target, gc := guestOf(t, k, first)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var ex protocol.ExecResponse
	if err := gc.DoJSON(ctx, target, http.MethodPost, protocol.PathExec, protocol.ExecRequest{Command: "cat " + protocol.EngineEnvPath}, &ex); err != nil {
		t.Fatalf("read %s in the guest: %v", protocol.EngineEnvPath, err)
	}
	wantEnv := fmt.Sprintf("%s=http://10.0.2.2:%d/api/v1", protocol.EnvOpenRouterURL, stand.port)
	if !strings.Contains(ex.Stdout, wantEnv) {
		t.Errorf("%s in the guest holds %q; want %q", protocol.EngineEnvPath, ex.Stdout, wantEnv)
	}
	// A message, which the deliverer takes to the engine, makes it call its
	// model: the stand-in sees the pushed key.
	w := work{t: t, k: k, dot: first}
	if _, err := w.dots().PostMessage(ctx, "default", first, "hello"); err != nil {
		t.Fatalf("post a message: %v", err)
	}
	eventually(t, 90*time.Second, "the engine calls the stand-in with the pushed key", func() error {
		for _, r := range stand.requests() {
			if strings.Contains(r, " /api/v1/") && strings.HasSuffix(r, " Bearer "+key) {
				return nil
			}
		}
		return fmt.Errorf("the stand-in saw %q", stand.requests())
	})
}

// readyDot: phase READY, the three steps True, ConfigApplied of this
// generation.
func readyDot(d *dotsv1.Dot) bool {
	applied := dotCond(d, dotsv1.ConfigAppliedCondition)
	return d.Status.Phase == dotsv1.DotReady &&
		dotCond(d, dotsv1.KeyPushedCondition).Status == metav1.ConditionTrue &&
		applied.Status == metav1.ConditionTrue &&
		applied.ObservedGeneration == d.Generation &&
		strings.Contains(applied.Message, fmt.Sprintf("generation %d", d.Generation)) &&
		dotCond(d, dotsv1.AgentReadyCondition).Status == metav1.ConditionTrue
}

func dotCond(d *dotsv1.Dot, typ string) metav1.Condition {
	for _, c := range d.Status.Conditions {
		if c.Type == typ {
			return c
		}
	}
	return metav1.Condition{Type: typ}
}

// waitDot polls the Dot until ok, and fails with its status when the
// timeout passes.
func (k cvmKubectl) waitDot(name string, timeout time.Duration, ok func(*dotsv1.Dot) bool) *dotsv1.Dot {
	k.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		out, err := k.try("get", "dot", name, "-o", "json")
		d := &dotsv1.Dot{}
		if err == nil && json.Unmarshal([]byte(out), d) == nil && ok(d) {
			return d
		}
		if time.Now().After(deadline) {
			ev, _ := k.try("get", "events", "--field-selector", "involvedObject.name="+name)
			k.t.Fatalf("Dot %s did not get there within %s; last:\n%s\nevents:\n%s\nserver log:\n%s", name, timeout, out, ev, k.s.logTail(40))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// secretOpenRouter runs `invisible-dots secret openrouter [args]` with stdin.
func secretOpenRouter(env []string, stdin string, args ...string) (string, error) {
	cmd := exec.Command(binary, append([]string{"secret", "openrouter"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// doctorRow runs `invisible-dots doctor --json` and returns one row.
func doctorRow(t testing.TB, env []string, name string) struct{ Status, Detail, Fix string } {
	t.Helper()
	cmd := exec.Command(binary, "doctor", "--json")
	cmd.Env = append(os.Environ(), env...)
	out, _ := cmd.Output() // exit 1 while a row is missing
	var rep struct {
		Checks []struct{ Name, Status, Detail, Fix string }
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("doctor --json: %v\n%s", err, out)
	}
	for _, c := range rep.Checks {
		if c.Name == name {
			return struct{ Status, Detail, Fix string }{c.Status, c.Detail, c.Fix}
		}
	}
	t.Fatalf("doctor has no %q row:\n%s", name, out)
	return struct{ Status, Detail, Fix string }{}
}

// guestOf is the Dot's guest as the host agent reaches it: the target the
// QEMU driver builds from the VM's record (port, pid, start time, boot id),
// which must name the QEMU the Computer reports now, and a client of the
// proven channel to it.
func guestOf(t testing.TB, k cvmKubectl, dot string) (guestclient.Target, *guestclient.Client) {
	t.Helper()
	c := k.getComputer(dot)
	d, err := qemu.New(context.Background(), qemu.Options{Home: home.Layout{Root: k.s.home}})
	if err != nil {
		t.Fatalf("the QEMU driver of the server's home: %v", err)
	}
	target, err := d.GuestTarget(context.Background(), home.VMID{Namespace: c.Namespace, Name: c.Name}, guestToken(t, k, dot))
	if err != nil {
		t.Fatalf("the guest of %s: %v", dot, err)
	}
	if target.PID != int(c.Status.PID) || target.Port != int(c.Status.GuestPort) {
		t.Fatalf("the VM's record names pid %d port %d, the Computer pid %d port %d", target.PID, target.Port, c.Status.PID, c.Status.GuestPort)
	}
	return target, guestclient.New()
}

// guestToken reads a Computer's guest token from its Secret.
func guestToken(t testing.TB, k cvmKubectl, computer string) string {
	t.Helper()
	enc := strings.TrimSpace(k.run("get", "secret", computer+"-guest-token", "-o", "jsonpath={.data.token}"))
	b, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		t.Fatalf("decode the guest token: %v", err)
	}
	return string(b)
}
