package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// TestMain lets the test binary be the engine of the crash tests: with
// ENGINE_SUBPROCESS=1 it runs the engine (with the stand-in tools logging
// every run to FAKE_TOOL_LOG) until SIGTERM or a SIGKILL from the crash hook.
func TestMain(m *testing.M) {
	if os.Getenv("ENGINE_SUBPROCESS") == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
		defer stop()
		tools := &fakeTools{logPath: os.Getenv("FAKE_TOOL_LOG")}
		if os.Getenv("FAKE_HOLD") == "1" {
			tools.hold = make(chan struct{})
		}
		log := slog.New(slog.NewTextHandler(os.Stderr, nil))
		if err := Run(ctx, ConfigFromEnv(os.Getenv), Deps{Tools: tools, Files: newFakeFiles(), Log: log}); err != nil {
			fmt.Fprintln(os.Stderr, "engine:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// sub is the engine in a child process.
type sub struct {
	cmd  *exec.Cmd
	c    *http.Client
	done chan error
}

func startSub(t testing.TB, dir, orURL, crashAt string, extra ...string) *sub {
	t.Helper()
	sock := filepath.Join(dir, "agent.sock")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(),
		"ENGINE_SUBPROCESS=1",
		"FAKE_TOOL_LOG="+filepath.Join(dir, "tool.log"),
		protocol.EnvAgentSocket+"="+sock,
		protocol.EnvAgentdSocket+"="+filepath.Join(dir, "agentd.sock"),
		protocol.EnvEngineState+"="+filepath.Join(dir, "state"),
		protocol.EnvWorkspace+"=/home/dot/workspace",
		protocol.EnvModelUser+"=nobody",
		protocol.EnvOpenRouterURL+"="+orURL,
		EnvBuiltinSkills+"="+filepath.Join(dir, "skills"),
		EnvTestCrashAt+"="+crashAt,
	)
	cmd.Env = append(cmd.Env, extra...)
	logf, _ := os.OpenFile(filepath.Join(dir, "engine.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	cmd.Stderr = logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &sub{cmd: cmd, c: unixClient(sock), done: make(chan error, 1)}
	go func() { s.done <- cmd.Wait(); logf.Close() }()
	t.Cleanup(func() { cmd.Process.Kill(); <-s.done })
	deadline := time.Now().Add(20 * time.Second)
	for {
		if resp, err := s.c.Get("http://engine/health"); err == nil {
			resp.Body.Close()
			return s
		}
		select {
		case err := <-s.done:
			s.done <- err
			log, _ := os.ReadFile(filepath.Join(dir, "engine.log"))
			t.Fatalf("engine exited at start: %v\n%s", err, log)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("engine did not serve in 20 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// post sends a request and ignores a connection the engine's death cut.
func (s *sub) post(method, path string, body any) int {
	raw, _ := json.Marshal(body)
	req, _ := http.NewRequest(method, "http://engine"+path, strings.NewReader(string(raw)))
	resp, err := s.c.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func (s *sub) push(cfg protocol.RuntimeConfig) {
	s.post("PUT", "/config", cfg)
	s.post("POST", "/secrets", protocol.SecretsRequest{OpenRouterAPIKey: "sk-or-test-key-123"})
}

func (s *sub) send(id, typ string, data any) {
	raw, _ := json.Marshal(data)
	s.post("POST", "/events", protocol.InboundEvent{ID: id, Type: typ, TS: "2026-11-30T12:00:00Z", Data: raw})
}

// waitExit waits for the process to end (the crash hook's SIGKILL).
func (s *sub) waitExit(d time.Duration) bool {
	select {
	case err := <-s.done:
		s.done <- err
		return true
	case <-time.After(d):
		return false
	}
}

func toolLog(t *testing.T, dir string) []string {
	raw, err := os.ReadFile(filepath.Join(dir, "tool.log"))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(strings.ReplaceAll(string(raw), " ", "_"))
}

// TestCrashAtEveryCommitPoint kills the engine with SIGKILL right before and
// right after each commit point of a chat turn with one tool call, starts it
// again, and checks ref 8.7: the call ran at most once, tool.called was
// written at most once, an unknown outcome was told to the model, every
// event streamed before the kill keeps its seq, and the message got exactly
// one answer.
func TestCrashAtEveryCommitPoint(t *testing.T) {
	if testing.Short() {
		t.Skip("starts engine processes")
	}
	// The commit points of such a turn: the message comes while the chat
	// is free, so its turn opens (THINKING) with it (inbound); its end
	// (DONE, IDLE) commits with the answer (assistant:2).
	points := []string{"inbound", "assistant", "assistant:2", "intent", "result"}
	var cases []string
	for _, p := range points {
		cases = append(cases, "before:"+p, p)
	}
	or := newFakeOpenRouter(t)
	for _, crashAt := range cases {
		t.Run(crashAt, func(t *testing.T) {
			dir := t.TempDir()
			first := startSub(t, dir, or.srv.URL, crashAt)
			seen := openStream(t, first.c, 0, false)
			first.push(testConfig(nil))
			first.send("m1", protocol.InboundUserMessage, protocol.UserMessage{Text: `run fake_write {"path":"a.txt"}`})
			crashed := first.waitExit(10 * time.Second)
			if !crashed {
				t.Fatalf("the engine did not die at %s", crashAt)
			}
			before := seen.Events()

			second := startSub(t, dir, or.srv.URL, "")
			second.push(testConfig(nil))
			second.send("m1", protocol.InboundUserMessage, protocol.UserMessage{Text: `run fake_write {"path":"a.txt"}`})
			after := openStream(t, second.c, 0, false)
			evs := after.waitFor(t, "the answer", hasType(protocol.EventMessageAssistant))

			for i, e := range evs {
				if e.Seq != int64(i+1) {
					t.Fatalf("seq %d at position %d: the outbox has a gap or a repeat", e.Seq, i)
				}
			}
			ids := map[string]bool{}
			for _, e := range evs {
				if ids[e.ID] {
					t.Errorf("event id %s repeated", e.ID)
				}
				ids[e.ID] = true
			}
			for _, b := range before {
				if b.Seq > int64(len(evs)) || evs[b.Seq-1].ID != b.ID || evs[b.Seq-1].Type != b.Type {
					t.Errorf("event %d %s streamed before the kill is not at its seq afterwards", b.Seq, b.Type)
				}
			}
			answers := ofType(evs, protocol.EventMessageAssistant)
			if len(answers) != 1 {
				t.Errorf("%d answers, want exactly 1: %s", len(answers), describe(evs))
			}
			ran := len(toolLog(t, dir))
			okCalls, interrupted := 0, 0
			for _, e := range ofType(evs, protocol.EventToolCalled) {
				tc := decode[protocol.ToolCalled](t, e)
				if tc.Interrupted != nil && *tc.Interrupted {
					interrupted++
				} else if tc.OK {
					okCalls++
				}
			}
			if ran > 1 || okCalls+interrupted > 1 || okCalls > ran {
				t.Errorf("ran %d times, tool.called ok %d, interrupted %d: a call ran or was reported twice\n%s", ran, okCalls, interrupted, describe(evs))
			}
			if ran == 1 && okCalls == 0 && interrupted == 0 {
				t.Errorf("the call ran but its outcome was never reported")
			}
			if interrupted == 1 {
				told := false
				for _, r := range or.Requests() {
					for _, m := range r.Messages {
						if m.Role == "tool" && strings.HasPrefix(m.text(), "This call was interrupted before its result was recorded.") {
							told = true
						}
					}
				}
				if !told {
					t.Errorf("the interrupted call was not told to the model")
				}
			}
		})
	}
}

// TestTaskInterruptedThreeTimesFails kills the engine right after a task's
// start three times; the next start fails it (ref 8.7).
func TestTaskInterruptedThreeTimesFails(t *testing.T) {
	if testing.Short() {
		t.Skip("starts engine processes")
	}
	or := newFakeOpenRouter(t)
	dir := t.TempDir()
	for i := 0; i < 3; i++ {
		s := startSub(t, dir, or.srv.URL, "turn-open")
		s.push(testConfig(nil))
		if i == 0 {
			s.send("t1", protocol.InboundTaskCreated, protocol.TaskCreated{TaskID: "fragile", Description: "do it"})
		}
		if !s.waitExit(10 * time.Second) {
			t.Fatalf("start %d did not die at the task's start", i+1)
		}
	}
	s := startSub(t, dir, or.srv.URL, "")
	r := openStream(t, s.c, 0, false)
	evs := r.waitFor(t, "task.failed", hasType(protocol.EventTaskFailed))
	if got := decode[protocol.TaskFailed](t, ofType(evs, protocol.EventTaskFailed)[0]).Error; got != "stopped: the task was interrupted 3 times" {
		t.Errorf("task.failed error = %q", got)
	}
	if n := countType(evs, protocol.EventTaskStarted); n != 3 {
		t.Errorf("%d task.started, want 3", n)
	}
	if n := countType(evs, protocol.EventAgentStarted); n != 4 {
		t.Errorf("%d agent.started, want one per start (4)", n)
	}
}

// TestTaskResumedAfterCrashWithNote kills the engine right after the task's
// tool call was decided to run; the next start reports the call
// interrupted and resumes the task with the note.
func TestTaskResumedAfterCrashWithNote(t *testing.T) {
	if testing.Short() {
		t.Skip("starts engine processes")
	}
	or := newFakeOpenRouter(t)
	dir := t.TempDir()
	s := startSub(t, dir, or.srv.URL, "intent")
	s.push(testConfig(nil))
	s.send("t1", protocol.InboundTaskCreated, protocol.TaskCreated{TaskID: "job", Description: `run fake_write {"path":"x"}`})
	if !s.waitExit(10 * time.Second) {
		t.Fatal("the engine did not die at the intent")
	}
	s = startSub(t, dir, or.srv.URL, "")
	s.push(testConfig(nil))
	r := openStream(t, s.c, 0, false)
	evs := r.waitFor(t, "task.completed", hasType(protocol.EventTaskCompleted))
	if got := decode[protocol.TaskCompleted](t, ofType(evs, protocol.EventTaskCompleted)[0]).Summary; got != "resumed and finished" {
		t.Errorf("summary = %q, want the resumed run's", got)
	}
	if ran := toolLog(t, dir); len(ran) != 0 {
		t.Errorf("the call ran after its intent was cut: %q", ran)
	}
}

// TestSIGTERMWithAToolRunning: the tool in flight gets the grace, then the
// process ends; the next start reports the call interrupted once.
func TestSIGTERMWithAToolRunning(t *testing.T) {
	if testing.Short() {
		t.Skip("starts engine processes")
	}
	or := newFakeOpenRouter(t)
	dir := t.TempDir()
	s := startSub(t, dir, or.srv.URL, "", "FAKE_HOLD=1", EnvTestGrace+"=300ms")
	r := openStream(t, s.c, 0, false)
	s.push(testConfig(nil))
	s.send("m1", protocol.InboundUserMessage, protocol.UserMessage{Text: `run fake_exec {"cmd":"sleep 70"}`})
	r.waitFor(t, "EXECUTING", func(evs []protocol.OutboundEvent) bool {
		for _, e := range ofType(evs, protocol.EventAgentState) {
			if decode[protocol.AgentStateChanged](t, e).State == protocol.StateExecuting {
				return true
			}
		}
		return false
	})
	s.cmd.Process.Signal(syscall.SIGTERM)
	if !s.waitExit(15 * time.Second) {
		t.Fatal("the engine did not end after SIGTERM and the grace")
	}
	if err := <-s.done; err != nil {
		t.Errorf("exit after SIGTERM = %v, want a clean exit", err)
	} else {
		s.done <- nil
	}
	s2 := startSub(t, dir, or.srv.URL, "")
	s2.push(testConfig(nil))
	r2 := openStream(t, s2.c, 0, false)
	evs := r2.waitFor(t, "the owed answer", hasType(protocol.EventMessageAssistant))
	called := ofType(evs, protocol.EventToolCalled)
	if len(called) != 1 {
		t.Fatalf("%d tool.called, want the interrupted one: %s", len(called), describe(evs))
	}
	if tc := decode[protocol.ToolCalled](t, called[0]); tc.Interrupted == nil || tc.Target == nil || *tc.Target != "sleep 70" {
		t.Errorf("tool.called = %s, want interrupted with its target", called[0].Data)
	}
}

var _ = context.Background

// TestCrashAroundAnApproval kills the engine at each commit point of a
// parked call, its decision and the approved call's run, and checks that the
// approved call runs at most once, is reported at most once, and the chat
// answers exactly once.
func TestCrashAroundAnApproval(t *testing.T) {
	if testing.Short() {
		t.Skip("starts engine processes")
	}
	or := newFakeOpenRouter(t)
	cfg := testConfig(map[string]protocol.Decision{"files.write": protocol.Ask})
	// The message's turn opens with it (inbound); turn-open is the turn
	// that tells the decision.
	for _, crashAt := range []string{"before:park", "park", "before:inbound:2", "inbound:2", "turn-open", "before:intent", "intent", "before:result", "result"} {
		t.Run(crashAt, func(t *testing.T) {
			dir := t.TempDir()
			answered := map[string]bool{}
			// drive answers every approval it sees and returns when the chat
			// answered or the process died.
			drive := func(s *sub, r *streamReader) bool {
				deadline := time.After(30 * time.Second)
				for {
					evs := r.Events()
					if hasType(protocol.EventMessageAssistant)(evs) {
						return true
					}
					for _, e := range ofType(evs, protocol.EventApprovalRequested) {
						id := decode[protocol.ApprovalRequested](t, e).ApprovalID
						if !answered[id] {
							answered[id] = true
							s.send("dec-"+id, protocol.InboundApprovalReceived, protocol.ApprovalReceived{ApprovalID: id, Decision: protocol.ApprovalApprove})
						}
					}
					select {
					case <-r.wake:
					case <-r.done:
						return false
					case <-deadline:
						t.Fatalf("no answer and no death in 30 s: %s", describe(r.Events()))
					}
				}
			}
			first := startSub(t, dir, or.srv.URL, crashAt)
			r1 := openStream(t, first.c, 0, false)
			first.push(cfg)
			first.send("m1", protocol.InboundUserMessage, protocol.UserMessage{Text: `run fake_write {"path":"a.txt"}`})
			if drive(first, r1) {
				t.Fatalf("the engine did not die at %s", crashAt)
			}
			first.waitExit(5 * time.Second)
			second := startSub(t, dir, or.srv.URL, "")
			second.push(cfg)
			second.send("m1", protocol.InboundUserMessage, protocol.UserMessage{Text: `run fake_write {"path":"a.txt"}`})
			// A decision whose outcome the host did not learn is sent again.
			for id := range answered {
				second.send("dec-"+id, protocol.InboundApprovalReceived, protocol.ApprovalReceived{ApprovalID: id, Decision: protocol.ApprovalApprove})
			}
			r2 := openStream(t, second.c, 0, false)
			if !drive(second, r2) {
				t.Fatal("the restarted engine died")
			}
			evs := r2.Events()
			if n := countType(evs, protocol.EventMessageAssistant); n != 1 {
				t.Errorf("%d answers, want 1: %s", n, describe(evs))
			}
			ran := len(toolLog(t, dir))
			reported := countType(evs, protocol.EventToolCalled)
			if ran > 1 || reported > 1 {
				t.Errorf("ran %d, reported %d: the approved call ran or was reported twice: %s", ran, reported, describe(evs))
			}
			if ran == 1 && reported == 0 {
				t.Errorf("the approved call ran and was never reported")
			}
		})
	}
}
