package daemon

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/invisible-dots/invisible-dots/guest/engine/api"
	"github.com/invisible-dots/invisible-dots/guest/engine/store"
	"github.com/invisible-dots/invisible-dots/guest/engine/work"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// serveStore serves the API over st on a socket (the stream needs only the
// store).
func serveStore(b *testing.B, st *store.Store) *http.Client {
	sock := filepath.Join(b.TempDir(), "agent.sock")
	ln, err := api.Listen(sock, -1)
	if err != nil {
		b.Fatal(err)
	}
	eng := work.New(work.Options{Store: st, Tools: &fakeTools{}})
	srv := &http.Server{Handler: (&api.Server{Engine: eng, Store: st, Log: quietLog()}).Handler()}
	go srv.Serve(ln)
	b.Cleanup(func() { srv.Close() })
	return unixClient(sock)
}

// BenchmarkOutboxReplay: events per second a stream replays from the outbox
// (a host reconnecting with ?after=).
func BenchmarkOutboxReplay(b *testing.B) {
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(b.TempDir(), store.FileName))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	for i := 0; i < b.N; i += 1000 {
		st.Write(ctx, "bench", func(tx *store.Tx) error {
			for j := i; j < i+1000 && j < b.N; j++ {
				if _, err := tx.Emit(ctx, protocol.EventToolCalled, protocol.ToolCalled{Tool: "exec", Permission: "computer.exec", Decision: protocol.Allow, OK: true, DurationMS: 12}); err != nil {
					return err
				}
			}
			return nil
		})
	}
	c := serveStore(b, st)
	b.ResetTimer()
	start := time.Now()
	countStream(b, c, b.N, nil)
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
}

// BenchmarkOutboxLive: events per second streamed as they commit, one event
// a commit point, written by 16 writers at once (the engine's chat and task
// turns, inbound events, automations and browsers all write the outbox);
// commit points that meet are committed together (store's group commit).
func BenchmarkOutboxLive(b *testing.B) { benchmarkOutboxLive(b, 64) }

// BenchmarkOutboxLiveOneWriter: the same with one writer waiting for each
// commit before the next: nothing can be grouped, so each event costs a
// synchronous=FULL commit (an fsync of the WAL).
func BenchmarkOutboxLiveOneWriter(b *testing.B) { benchmarkOutboxLive(b, 1) }

func benchmarkOutboxLive(b *testing.B, writers int) {
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(b.TempDir(), store.FileName))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	c := serveStore(b, st)
	b.ResetTimer()
	start := time.Now()
	countStream(b, c, b.N, func() {
		for w := 0; w < writers; w++ {
			go func() {
				for i := w; i < b.N; i += writers {
					if err := st.Write(ctx, "bench", func(tx *store.Tx) error {
						_, err := tx.Emit(ctx, protocol.EventAgentState, protocol.AgentStateChanged{State: protocol.StateThinking})
						return err
					}); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
	b.ReportMetric(st.GroupSize(), "events/commit")
}

// BenchmarkTurnOverhead: a chat turn end to end (accept, open, request,
// answer, states) with a stand-in model that answers at once; what it
// measures is the engine's own cost per turn.
func BenchmarkTurnOverhead(b *testing.B) {
	h := startEngine(b, b.TempDir(), nil, nil)
	h.configure(testConfig(nil))
	s := countAnswers(b, h.c)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		h.send(fmt.Sprintf("m%d", i), protocol.InboundUserMessage, protocol.UserMessage{Text: "hi"})
		s.waitFor(b, i+1)
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/1000, "ms/turn")
}

// BenchmarkTurnOverheadWithCall: a chat turn with one allowed tool call, so
// the gate decides once per turn (the guardrails' rules are read there).
func BenchmarkTurnOverheadWithCall(b *testing.B) {
	h := startEngine(b, b.TempDir(), nil, nil)
	h.configure(testConfig(nil))
	s := countAnswers(b, h.c)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		h.send(fmt.Sprintf("m%d", i), protocol.InboundUserMessage, protocol.UserMessage{Text: `run fake_exec {"cmd":"true"}`})
		s.waitFor(b, i+1)
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/1000, "ms/turn")
}

// answers counts the message.assistant events of the stream, for the turn
// benchmarks. Each event's line is matched, not decoded, and the count is
// kept as the events come: openStream decodes every event, and each wait
// walked all of them, a cost of the host's (not the engine's) that grew
// with the chat. The engine streams the same events either way.
type answers struct {
	mu   sync.Mutex
	n    int
	wake chan struct{}
	done chan struct{}
}

func countAnswers(b *testing.B, c *http.Client) *answers {
	a := &answers{wake: make(chan struct{}, 1)}
	// The event's own type: a string of its data holds no bare quote.
	mark := []byte(`"type":"` + protocol.EventMessageAssistant + `"`)
	a.done = followStream(b, c, 0, false, func(sc *bufio.Scanner) {
		for sc.Scan() {
			if line := sc.Bytes(); bytes.HasPrefix(line, []byte("data: ")) && bytes.Contains(line, mark) {
				a.mu.Lock()
				a.n++
				a.mu.Unlock()
				select {
				case a.wake <- struct{}{}:
				default:
				}
			}
		}
	})
	return a
}

// waitFor waits until the stream brought n answers, and fails on more.
func (a *answers) waitFor(b *testing.B, n int) {
	deadline := time.After(30 * time.Second)
	for {
		a.mu.Lock()
		got := a.n
		a.mu.Unlock()
		switch {
		case got > n:
			b.Fatalf("%d answers came, %d were asked for", got, n)
		case got == n:
			return
		}
		select {
		case <-a.wake:
		case <-a.done:
			b.Fatalf("the stream ended after %d answers of %d", got, n)
		case <-deadline:
			b.Fatalf("timed out waiting for answer %d (%d came)", n, got)
		}
	}
}

// BenchmarkEngineMemory: resident memory of an engine process at idle and
// after 1000 chat turns.
func BenchmarkEngineMemory(b *testing.B) {
	for i := 0; i < b.N; i++ {
		or := newFakeOpenRouter(b)
		dir := b.TempDir()
		s := startSub(b, dir, or.srv.URL, "")
		s.push(testConfig(nil))
		time.Sleep(500 * time.Millisecond)
		idle := rssKiB(b, s.cmd.Process.Pid)
		r := openStream(b, s.c, 0, false)
		for n := 0; n < 1000; n++ {
			s.send(fmt.Sprintf("m%d", n), protocol.InboundUserMessage, protocol.UserMessage{Text: "hello there"})
			r.waitFor(b, "the answer", func(evs []protocol.OutboundEvent) bool {
				return countType(evs, protocol.EventMessageAssistant) == n+1
			})
		}
		after := rssKiB(b, s.cmd.Process.Pid)
		b.ReportMetric(float64(idle)/1024, "idle-RSS-MiB")
		b.ReportMetric(float64(after)/1024, "RSS-after-1000-turns-MiB")
	}
}

func rssKiB(b *testing.B, pid int) int {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.Atoi(strings.Fields(rest)[0])
			return n
		}
	}
	b.Fatal("no VmRSS")
	return 0
}

// countStream reads the stream from the start until n events came, without
// decoding them (the host's cost is not the engine's); started, when set,
// runs in the background once the stream is open.
func countStream(b *testing.B, c *http.Client, n int, started func()) {
	resp, err := c.Get("http://engine/events/stream?after=0")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	if started != nil {
		go started()
	}
	sc := bufio.NewScanner(resp.Body)
	got := 0
	for got < n && sc.Scan() {
		if strings.HasPrefix(sc.Text(), "data: ") {
			got++
		}
	}
	if got < n {
		b.Fatalf("the stream ended after %d of %d events: %v", got, n, sc.Err())
	}
}
