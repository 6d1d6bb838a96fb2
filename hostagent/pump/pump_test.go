package pump

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/hostagent/guestclient"
	"github.com/invisible-dots/invisible-dots/hostagent/guestclient/fakeguest"
	"github.com/invisible-dots/invisible-dots/hostagent/guestnotice"
	dotsclient "github.com/invisible-dots/invisible-dots/internal/dotsapi/client"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
)

var (
	testKey    = types.NamespacedName{Namespace: "default", Name: "helper"}
	testTarget = guestclient.Target{Port: 40000, PID: 1001, Token: "0123456789abcdef0123456789abcdef"}
)

const testUID = "uid-dot"

// fakeLog is the control plane's log as the ingestion route keeps it: each
// seq once, the cursor the highest seq stored. Named fake: no Dots API.
type fakeLog struct {
	mu      sync.Mutex
	stored  map[int64]protocol.OutboundEvent
	order   []int64
	batches []int
	// repeats counts events sent that were stored already.
	repeats int
	// fail answers the next ingestions with these errors, in order.
	fail []error
}

func newFakeLog(preStored ...int64) *fakeLog {
	l := &fakeLog{stored: map[int64]protocol.OutboundEvent{}}
	for _, s := range preStored {
		l.stored[s] = protocol.OutboundEvent{Seq: s}
	}
	return l
}

func (l *fakeLog) IngestEvents(_ context.Context, host, ns, dot, uid string, events []protocol.OutboundEvent) (wire.Ingested, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if host != "h1" || ns != testKey.Namespace || dot != testKey.Name || uid != testUID {
		return wire.Ingested{}, fmt.Errorf("ingestion for %s %s/%s %s; want the test's Dot", host, ns, dot, uid)
	}
	if len(l.fail) > 0 {
		err := l.fail[0]
		l.fail = l.fail[1:]
		return wire.Ingested{}, err
	}
	var last int64
	out := wire.Ingested{}
	for _, ev := range events {
		if ev.Seq <= last {
			return wire.Ingested{}, &dotsclient.Error{Status: http.StatusBadRequest, Code: wire.CodeInvalidRequest, Message: "seqs must increase"}
		}
		last = ev.Seq
		if _, ok := l.stored[ev.Seq]; ok {
			l.repeats++
			continue
		}
		l.stored[ev.Seq] = ev
		l.order = append(l.order, ev.Seq)
		out.Stored++
	}
	if len(events) > 0 {
		l.batches = append(l.batches, len(events))
	}
	for s := range l.stored {
		out.Cursor = max(out.Cursor, s)
	}
	return out, nil
}

func (l *fakeLog) has(seqs ...int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range seqs {
		if _, ok := l.stored[s]; !ok {
			return false
		}
	}
	return true
}

type logged struct {
	Order   []int64
	Types   []string
	Repeats int
}

func (l *fakeLog) summary() logged {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := logged{Order: l.order, Repeats: l.repeats}
	for _, seq := range l.order {
		s.Types = append(s.Types, l.stored[seq].Type)
	}
	return s
}

func state(s string) protocol.OutboundEvent {
	return protocol.OutboundEvent{Type: protocol.EventAgentState, Data: json.RawMessage(`{"state":"` + s + `"}`)}
}

func seqs(from, to int64) []int64 {
	var out []int64
	for s := from; s <= to; s++ {
		out = append(out, s)
	}
	return out
}

func TestPump(t *testing.T) {
	started := protocol.OutboundEvent{Type: protocol.EventAgentStarted}
	conflict := &dotsclient.Error{Status: http.StatusConflict, Code: wire.CodeDotChanged, Message: "made again"}
	unavailable := &dotsclient.Error{Status: http.StatusServiceUnavailable, Message: "the API server is busy"}
	tests := map[string]struct {
		reason string
		// setup fills the guest's outbox and the control plane's log.
		setup     func(s *fakeguest.Stream, l *fakeLog)
		batchSize int
		delay     time.Duration
		// until is the seqs stored when the pump has done its part.
		until []int64
		want  logged
		// opened is the cursor of each connection to the stream.
		opened  []int64
		batches []int
		started int
		wantErr error
	}{
		"starts after the control plane's cursor": {
			reason: "the log holds seqs 1 and 2 already: the stream is opened after 2 and only 3 to 5 are sent",
			setup: func(s *fakeguest.Stream, l *fakeLog) {
				s.Append(state("IDLE"), state("THINKING"), state("IDLE"), state("THINKING"), state("IDLE"))
				l.stored[1], l.stored[2] = protocol.OutboundEvent{Seq: 1}, protocol.OutboundEvent{Seq: 2}
			},
			until:  seqs(1, 5),
			want:   logged{Order: seqs(3, 5), Types: []string{"agent.state", "agent.state", "agent.state"}},
			opened: []int64{2},
		},
		"a dropped stream goes on after the last seq stored": {
			reason: "the connection drops after 2 events, then after 3: each reconnect asks after the cursor, nothing is lost or sent twice",
			setup: func(s *fakeguest.Stream, l *fakeLog) {
				for range 6 {
					s.Append(state("IDLE"))
				}
				s.CutNext(2, 3)
			},
			until:  seqs(1, 6),
			want:   logged{Order: seqs(1, 6), Types: strings.Split(strings.Repeat("agent.state ", 6), " ")[:6]},
			opened: []int64{0, 2, 5},
		},
		"batches go when full": {
			reason: "with batches of 2 and a long delay, 4 events go as two batches of 2",
			setup: func(s *fakeguest.Stream, l *fakeLog) {
				s.Append(state("IDLE"), state("IDLE"), state("IDLE"), state("IDLE"))
			},
			batchSize: 2, delay: time.Hour,
			until:   seqs(1, 4),
			want:    logged{Order: seqs(1, 4), Types: []string{"agent.state", "agent.state", "agent.state", "agent.state"}},
			opened:  []int64{0},
			batches: []int{2, 2},
		},
		"a lone event goes after the delay": {
			reason:    "one event does not wait for a full batch",
			setup:     func(s *fakeguest.Stream, l *fakeLog) { s.Append(state("IDLE")) },
			batchSize: 500, delay: 5 * time.Millisecond,
			until:   seqs(1, 1),
			want:    logged{Order: seqs(1, 1), Types: []string{"agent.state"}},
			opened:  []int64{0},
			batches: []int{1},
		},
		"a message that is not an event keeps its seq": {
			reason: "a message that is not JSON is handed on under its seq, without a type, for the log to store as refused; the stream goes on",
			setup: func(s *fakeguest.Stream, l *fakeLog) {
				s.Append(state("IDLE"))
				s.AppendRaw(2, "{not json")
				s.Append(state("THINKING"))
			},
			until:  seqs(1, 3),
			want:   logged{Order: seqs(1, 3), Types: []string{"agent.state", "", "agent.state"}},
			opened: []int64{0},
		},
		"a seq sent twice in a stream is left out": {
			reason: "the guest repeats seq 1 within one connection: it is handed on once, and the batch's seqs increase",
			setup: func(s *fakeguest.Stream, l *fakeLog) {
				ev := s.Append(state("IDLE"))[0]
				b, _ := json.Marshal(ev)
				s.AppendRaw(1, string(b))
				s.Append(state("THINKING"))
			},
			until:  seqs(1, 2),
			want:   logged{Order: seqs(1, 2), Types: []string{"agent.state", "agent.state"}},
			opened: []int64{0},
		},
		"a guest whose outbox started over goes on past the cursor": {
			reason: "the log holds 1 to 5; the guest lost its outbox and numbered on from the cursor (guest.outbox.reset at 6, the cursor rule): the reset is stored with what follows, and the stream is not asked again",
			setup: func(s *fakeguest.Stream, l *fakeLog) {
				for seq := int64(1); seq <= 5; seq++ {
					l.stored[seq] = protocol.OutboundEvent{Seq: seq}
				}
				s.Append(protocol.OutboundEvent{Seq: 6, Type: protocol.EventOutboxReset, Data: json.RawMessage(`{"cursor":5,"last_seq":2}`)}, state("IDLE"))
			},
			until:  seqs(1, 7),
			want:   logged{Order: seqs(6, 7), Types: []string{protocol.EventOutboxReset, "agent.state"}},
			opened: []int64{5},
		},
		"agent.started asks for a push": {
			reason:  "an engine that started again holds no key: the guest link is asked to push, once per agent.started",
			setup:   func(s *fakeguest.Stream, l *fakeLog) { s.Append(started, state("IDLE")) },
			until:   seqs(1, 2),
			want:    logged{Order: seqs(1, 2), Types: []string{"agent.started", "agent.state"}},
			opened:  []int64{0},
			started: 1,
		},
		"the control plane failing for a while loses nothing": {
			reason: "the cursor and a batch are asked again until they are answered",
			setup: func(s *fakeguest.Stream, l *fakeLog) {
				s.Append(state("IDLE"), state("THINKING"))
				l.fail = []error{unavailable, unavailable, unavailable}
			},
			until:  seqs(1, 2),
			want:   logged{Order: seqs(1, 2), Types: []string{"agent.state", "agent.state"}},
			opened: []int64{0},
		},
		"a Dot made again ends the pump": {
			reason:  "the control plane takes no events of this Dot any more: the pump stops and says why",
			setup:   func(s *fakeguest.Stream, l *fakeLog) { s.Append(state("IDLE")); l.fail = []error{conflict} },
			wantErr: ErrDotGone,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			stream, l := fakeguest.NewStream(), newFakeLog()
			tc.setup(stream, l)
			var mu sync.Mutex
			started := 0
			p := &Pump{Host: "h1", Key: testKey, DotUID: testUID, Target: testTarget,
				Guest: fakeguest.GuestFns{StreamFn: func(ctx context.Context, tg guestclient.Target, after int64) (io.ReadCloser, error) {
					if tg != testTarget {
						return nil, fmt.Errorf("stream of %s; want the test's guest", tg)
					}
					return stream.Open(ctx, after), nil
				}},
				Ingest:    l,
				Started:   func() { mu.Lock(); started++; mu.Unlock() },
				BatchSize: tc.batchSize, FlushDelay: tc.delay, Retry: time.Millisecond, Log: logr.Discard(),
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- p.Run(ctx) }()
			if tc.wantErr != nil {
				select {
				case err := <-done:
					if !errors.Is(err, tc.wantErr) {
						t.Errorf("%s\nRun = %v; want %v", tc.reason, err, tc.wantErr)
					}
				case <-time.After(5 * time.Second):
					t.Fatalf("%s\nRun did not end", tc.reason)
				}
				return
			}
			deadline := time.Now().Add(5 * time.Second)
			for !l.has(tc.until...) && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			// Whatever else would come, comes now.
			time.Sleep(20 * time.Millisecond)
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run after its context ended = %v; want nil", err)
			}
			if diff := cmp.Diff(tc.want, l.summary()); diff != "" {
				t.Errorf("%s\nthe log -want +got:\n%s", tc.reason, diff)
			}
			if diff := cmp.Diff(tc.opened, stream.Opened()); diff != "" {
				t.Errorf("%s\nthe stream's connections, by cursor -want +got:\n%s", tc.reason, diff)
			}
			if tc.batches != nil {
				if diff := cmp.Diff(tc.batches, l.batches); diff != "" {
					t.Errorf("%s\nbatches -want +got:\n%s", tc.reason, diff)
				}
			}
			if started != tc.started {
				t.Errorf("%s\n%d pushes asked; want %d", tc.reason, started, tc.started)
			}
		})
	}
}

func TestReadStream(t *testing.T) {
	big := strings.Repeat("x", maxEventBytes+10)
	tests := map[string]struct {
		reason string
		stream string
		want   []message
	}{
		"the engine's format": {reason: "id and data lines, a keep-alive comment, a blank line after each",
			stream: ": keep-alive\n\nid: 1\ndata: {\"a\":1}\n\nid: 2\ndata: {}\n\n",
			want:   []message{{id: "1", data: []byte(`{"a":1}`)}, {id: "2", data: []byte(`{}`)}}},
		"data lines joined": {reason: "several data lines make one data, joined by a newline",
			stream: "id: 3\ndata: a\ndata: b\n\n", want: []message{{id: "3", data: []byte("a\nb")}}},
		"CRLF": {reason: "lines may end in CRLF; a value without the space after the colon",
			stream: "id:4\r\ndata:{}\r\n\r\n", want: []message{{id: "4", data: []byte("{}")}}},
		"cut": {reason: "a message the end of the stream cut is not handed on",
			stream: "id: 1\ndata: {}\n\nid: 2\ndata: {\"tr", want: []message{{id: "1", data: []byte("{}")}}},
		"too large": {reason: "a message larger than the limit keeps its id and says why it has no data",
			stream: "id: 5\ndata: " + big + "\n\nid: 6\ndata: {}\n\n",
			want: []message{{id: "5", problem: fmt.Sprintf("the message is larger than %d bytes", maxEventBytes)},
				{id: "6", data: []byte("{}")}}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			out := make(chan message, 10)
			err := readStream(context.Background(), strings.NewReader(tc.stream), out)
			close(out)
			if !errors.Is(err, io.EOF) {
				t.Errorf("readStream = %v; want io.EOF at the end", err)
			}
			var got []message
			for m := range out {
				if len(m.data) > 100 {
					m.data = []byte(fmt.Sprintf("%d bytes", len(m.data)))
				}
				got = append(got, m)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(message{})); diff != "" {
				t.Errorf("%s\nmessages -want +got:\n%s", tc.reason, diff)
			}
		})
	}
}

// TestEventOf: a message of the stream is read as strictly as the guest
// reads the host's bodies: the envelope's keys exactly, nothing after it.
// One that is not stands for a refused event under its id's seq.
func TestEventOf(t *testing.T) {
	const ok = `{"seq":7,"id":"e7","type":"agent.started","ts":"2026-12-01T00:00:00Z","data":{}}`
	tests := map[string]struct {
		reason      string
		data        string
		wantProblem string
	}{
		"the protocol's": {reason: "the envelope as the engine writes it", data: ok},
		"data keys free": {reason: "the data's keys are the schemas' (they strip an unknown one)", data: `{"seq":7,"id":"e7","type":"agent.started","ts":"t","data":{"Whatever":1}}`},
		"unknown field":  {reason: "a field the envelope does not have", data: `{"seq":7,"id":"e7","type":"agent.started","ts":"t","data":{},"via":"relay"}`, wantProblem: `unknown field "via"`},
		"another case":   {reason: "a key in another case", data: `{"seq":7,"id":"e7","Type":"agent.started","ts":"t","data":{}}`, wantProblem: `unknown field "Type"`},
		"trailing value": {reason: "one JSON value a message", data: ok + ` {"seq":8}`, wantProblem: "more than one JSON value"},
		"not json":       {reason: "not JSON", data: `nope`, wantProblem: "not valid JSON"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ev, problem := eventOf(message{id: "7", data: []byte(tc.data)})
			if ev.Seq != 7 {
				t.Errorf("%s: seq = %d, want the id's 7", tc.reason, ev.Seq)
			}
			if tc.wantProblem == "" {
				if problem != "" {
					t.Errorf("%s: eventOf(%s) refused it: %s", tc.reason, tc.data, problem)
				}
				return
			}
			if !strings.Contains(problem, tc.wantProblem) {
				t.Errorf("%s: eventOf(%s) problem = %q, want it to hold %q", tc.reason, tc.data, problem, tc.wantProblem)
			}
		})
	}
}

func TestDecide(t *testing.T) {
	other := guestclient.Target{Port: 40001, PID: 1002, Token: testTarget.Token}
	run := &running{target: testTarget, uid: testUID}
	tests := map[string]struct {
		reason string
		notice guestnotice.Notice
		run    *running
		want   change
	}{
		"ready starts":        {"the READY procedure completed: a pump starts", guestnotice.Notice{Target: testTarget, DotUID: testUID, Ready: true}, nil, start},
		"not ready waits":     {"a guest not READY yet gets no pump yet", guestnotice.Notice{Target: testTarget, DotUID: testUID}, nil, keep},
		"ready again keeps":   {"the same guest READY again keeps its pump", guestnotice.Notice{Target: testTarget, DotUID: testUID, Ready: true}, run, keep},
		"not ready keeps":     {"an engine restarting inside the same QEMU keeps the pump, whose stream drops and reopens", guestnotice.Notice{Target: testTarget, DotUID: testUID}, run, keep},
		"no guest stops":      {"a Computer no longer RUNNING and Ready stops the pump", guestnotice.Notice{}, run, stop},
		"no guest, none":      {"nothing runs, nothing to stop", guestnotice.Notice{}, nil, keep},
		"new QEMU, ready":     {"another QEMU READY: the old pump stops and one starts for it", guestnotice.Notice{Target: other, DotUID: testUID, Ready: true}, run, restart},
		"new QEMU, not ready": {"another QEMU not READY yet: the old pump stops", guestnotice.Notice{Target: other, DotUID: testUID}, run, stop},
		"Dot made again":      {"another Dot of the same name is another log", guestnotice.Notice{Target: testTarget, DotUID: "uid-new", Ready: true}, run, restart},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := decide(tc.notice, tc.run); got != tc.want {
				t.Errorf("%s\ndecide = %s; want %s", tc.reason, got, tc.want)
			}
		})
	}
}

// TestPumps: the pumps follow the guest link's notices: one pump per READY
// guest, stopped when its Computer stops, replaced for a new QEMU.
func TestPumps(t *testing.T) {
	l := newFakeLog()
	streams := map[guestclient.Target]*fakeguest.Stream{testTarget: fakeguest.NewStream()}
	other := guestclient.Target{Port: 40001, PID: 1002, Token: testTarget.Token}
	streams[other] = fakeguest.NewStream()
	var mu sync.Mutex
	open := map[guestclient.Target]int{}
	guest := fakeguest.GuestFns{StreamFn: func(ctx context.Context, tg guestclient.Target, after int64) (io.ReadCloser, error) {
		mu.Lock()
		open[tg]++
		mu.Unlock()
		context.AfterFunc(ctx, func() { mu.Lock(); open[tg]--; mu.Unlock() })
		return streams[tg].Open(ctx, after), nil
	}}
	var pushed []types.NamespacedName
	p := &Pumps{Host: "h1", Guest: guest, Ingest: l, Retry: time.Millisecond, FlushDelay: time.Millisecond, Log: logr.Discard(),
		Started: func(k types.NamespacedName) { mu.Lock(); pushed = append(pushed, k); mu.Unlock() }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Start(ctx) }()
	openNow := func() map[guestclient.Target]int {
		mu.Lock()
		defer mu.Unlock()
		out := map[guestclient.Target]int{}
		for k, v := range open {
			if v != 0 {
				out[k] = v
			}
		}
		return out
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 5 s; streams open %v, log %+v", what, openNow(), l.summary())
			}
			time.Sleep(time.Millisecond)
		}
	}

	streams[testTarget].Append(protocol.OutboundEvent{Type: protocol.EventAgentStarted}, state("IDLE"))
	p.GuestNotice(guestnotice.Notice{Key: testKey, DotUID: testUID, Target: testTarget})
	time.Sleep(20 * time.Millisecond)
	if got := openNow(); len(got) != 0 {
		t.Errorf("a guest not READY yet: streams open %v; want none", got)
	}
	p.GuestNotice(guestnotice.Notice{Key: testKey, DotUID: testUID, Target: testTarget, Ready: true})
	waitFor("the READY guest's events are stored", func() bool { return l.has(1, 2) })
	p.GuestNotice(guestnotice.Notice{Key: testKey, DotUID: testUID, Target: testTarget, Ready: true})
	time.Sleep(20 * time.Millisecond)
	if got := openNow(); !cmp.Equal(got, map[guestclient.Target]int{testTarget: 1}) {
		t.Errorf("READY again: streams open %v; want the one", got)
	}

	// The guest's QEMU was replaced (a reboot): its seqs go on from the
	// same disk.
	streams[other].Append(protocol.OutboundEvent{Seq: 3, Type: protocol.EventAgentStarted})
	p.GuestNotice(guestnotice.Notice{Key: testKey, DotUID: testUID, Target: other, Ready: true})
	waitFor("the new QEMU's stream alone is open and its events stored", func() bool {
		return l.has(3) && cmp.Equal(openNow(), map[guestclient.Target]int{other: 1})
	})
	p.GuestNotice(guestnotice.Notice{Key: testKey})
	waitFor("a stopped Computer's stream closes", func() bool { return len(openNow()) == 0 })

	cancel()
	if err := <-done; err != nil {
		t.Errorf("Start = %v; want nil when its context ends", err)
	}
	if diff := cmp.Diff([]types.NamespacedName{testKey, testKey}, pushed); diff != "" {
		t.Errorf("pushes asked, one per agent.started -want +got:\n%s", diff)
	}
	if got := l.summary(); got.Repeats != 0 {
		t.Errorf("%d events sent again; want none", got.Repeats)
	}
}

// A batch without a FlushDelay goes as soon as nothing more is queued: a
// lone event (a chat's answer) waits for nobody, and what is queued joins
// the batch first. With one, the first event waits for it.
func TestFlushAfter(t *testing.T) {
	for _, tc := range []struct {
		delay    time.Duration
		queued   int
		wantWait time.Duration
		wantNow  bool
	}{
		{0, 0, 0, true},
		{0, 3, 0, false},
		{5 * time.Millisecond, 0, 5 * time.Millisecond, false},
		{5 * time.Millisecond, 3, 5 * time.Millisecond, false},
	} {
		p := &Pump{FlushDelay: tc.delay}
		if wait, now := p.flushAfter(tc.queued); wait != tc.wantWait || now != tc.wantNow {
			t.Errorf("FlushDelay %s, %d queued: flushAfter = %s, %v; want %s, %v", tc.delay, tc.queued, wait, now, tc.wantWait, tc.wantNow)
		}
	}
}
