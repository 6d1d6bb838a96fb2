package port_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"

	"github.com/invisible-dots/invisible-dots/internal/channels"
	"github.com/invisible-dots/invisible-dots/internal/channels/port"
	"github.com/invisible-dots/invisible-dots/internal/channels/port/porttest"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
)

// fakeSink is the hub as the adapter sees it.
type fakeSink struct {
	mu        sync.Mutex
	connected int
	inbound   []channels.Inbound
	// fail fails every Inbound with it.
	fail error
	// during runs inside Inbound (a pairing's welcome is sent from there).
	during func(ctx context.Context) error
}

func (s *fakeSink) Connected() {
	s.mu.Lock()
	s.connected++
	s.mu.Unlock()
}

func (s *fakeSink) Inbound(ctx context.Context, in channels.Inbound) error {
	s.mu.Lock()
	s.inbound = append(s.inbound, in)
	fail, during := s.fail, s.during
	s.mu.Unlock()
	if during != nil {
		if err := during(ctx); err != nil {
			return err
		}
	}
	return fail
}

func (s *fakeSink) Pressed(context.Context, channels.Press) (string, error) { return "", nil }

func (s *fakeSink) got() ([]channels.Inbound, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]channels.Inbound(nil), s.inbound...), s.connected
}

type run struct {
	adapter *port.Adapter
	session *porttest.FakeSession
	sink    *fakeSink
	keys    *porttest.FakeKeyStore
	done    chan error
	// finished is closed once Run returned (done may be read by then).
	finished chan struct{}
	cancel   context.CancelFunc
}

// start runs an adapter against a fake program until the test ends.
func start(t *testing.T, keys *porttest.FakeKeyStore, linking port.Linking) *run {
	t.Helper()
	prog := porttest.NewFakeProgram(t)
	if keys == nil {
		keys = porttest.NewFakeKeyStore(nil)
	}
	r := &run{sink: &fakeSink{}, keys: keys, done: make(chan error, 1), finished: make(chan struct{})}
	r.adapter = port.New(port.Config{Dial: prog.Dial, Keys: keys, Linking: linking, Log: logr.Discard()})
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() {
		r.done <- r.adapter.Run(ctx, r.sink)
		close(r.finished)
	}()
	t.Cleanup(func() {
		cancel()
		<-r.finished
	})
	r.session = prog.Accept(t)
	return r
}

func (r *run) result(t *testing.T) error {
	t.Helper()
	select {
	case err := <-r.done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
	return nil
}

// waitSession waits until the adapter's session is set (after welcome).
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func message(id uint64, peer, text string) port.Frame {
	return port.Frame{Type: port.TypeMessage, ID: id, Message: &port.Message{
		Peer: peer, Label: "Ana", Chat: peer + "@s.whatsapp.net", ExternalID: "4915100000000:" + text, Text: text, HasText: text != "",
	}}
}

func TestHelloCarriesTheStoredKeys(t *testing.T) {
	stored := port.Keys{"device": {"noise": []byte{1, 2, 3}}, "sessions": {"a": []byte("s")}}
	r := start(t, porttest.NewFakeKeyStore(stored), nil)
	if diff := cmp.Diff(stored, r.session.Hello.Keys); diff != "" {
		t.Errorf("hello's keys differ from the store's (-store +hello):\n%s", diff)
	}
	if r.session.Hello.V != port.Version {
		t.Errorf("hello's version = %d, want %d", r.session.Hello.V, port.Version)
	}
}

func TestConnectedOnceAndTheAccountHeard(t *testing.T) {
	prog := porttest.NewFakeProgram(t)
	var mu sync.Mutex
	var accounts []channels.Account
	a := port.New(port.Config{Dial: prog.Dial, Keys: porttest.NewFakeKeyStore(nil), Log: logr.Discard(),
		OnAccount: func(acc channels.Account) { mu.Lock(); accounts = append(accounts, acc); mu.Unlock() }})
	sink := &fakeSink{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx, sink) }()
	defer func() { cancel(); <-done }()
	s := prog.Accept(t)
	acc := &port.Account{ID: "4915100000000", Name: "+4915100000000"}
	s.Send(t, port.Frame{Type: port.TypeConnected, Account: acc})
	s.Send(t, port.Frame{Type: port.TypeConnected, Account: acc})
	s.Send(t, message(1, "4915111111111", "hi"))
	s.Next(t) // done: both connected frames were read
	if _, n := sink.got(); n != 1 {
		t.Errorf("Connected called %d times, want once per run", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(accounts) == 0 || accounts[0] != (channels.Account{ID: acc.ID, Name: acc.Name}) {
		t.Errorf("accounts heard = %v, want %v", accounts, acc)
	}
}

func TestInboundIsDeliveredOnceThenDone(t *testing.T) {
	r := start(t, nil, nil)
	r.session.Send(t, message(7, "4915111111111", "hello"))
	f := r.session.Next(t)
	if f.Type != port.TypeDone || f.ID != 7 {
		t.Fatalf("after a message the adapter sent %+v, want done 7", f)
	}
	r.session.Send(t, port.Frame{Type: port.TypeMessage, ID: 8, Message: &port.Message{Peer: "lid:123", Chat: "123@lid", ExternalID: "x:8"}})
	if f := r.session.Next(t); f.Type != port.TypeDone || f.ID != 8 {
		t.Fatalf("after a second message the adapter sent %+v, want done 8", f)
	}
	got, _ := r.sink.got()
	want := []channels.Inbound{
		{Peer: "4915111111111", Label: "Ana", Chat: "4915111111111@s.whatsapp.net", Private: true, ExternalID: "4915100000000:hello", Text: "hello", HasText: true},
		{Peer: "lid:123", Chat: "123@lid", Private: true, ExternalID: "x:8"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the hub got (-want +got):\n%s", diff)
	}
}

func TestAFailedInboundDropsTheConnection(t *testing.T) {
	r := start(t, nil, nil)
	r.sink.fail = errors.New("the database is away")
	r.session.Send(t, message(1, "4915111111111", "hello"))
	f := r.session.Next(t)
	if f.Type != port.TypeDrop {
		t.Fatalf("after a message the hub could not record, the adapter sent %+v, want drop", f)
	}
	if !r.session.Ended(5 * time.Second) {
		t.Fatal("the adapter kept the connection open after a failed Inbound")
	}
	err := r.result(t)
	if err == nil || errors.Is(err, channels.ErrNeedsRelink) || !strings.Contains(err.Error(), "the database is away") {
		t.Errorf("Run returned %v, want the hub's error (a restart, not a relink)", err)
	}
	if got, _ := r.sink.got(); len(got) != 1 {
		t.Errorf("the hub was given the message %d times, want once", len(got))
	}
}

func TestKeysAreSavedBeforeTheyAreAcknowledged(t *testing.T) {
	keys := porttest.NewFakeKeyStore(port.Keys{"sessions": {"old": []byte("o")}})
	r := start(t, keys, nil)
	r.session.Send(t, port.Frame{Type: port.TypeKeys, ID: 3, Changes: []port.KeyChange{
		{Group: "sessions", Key: "a", Value: []byte("A")},
		{Group: "sessions", Key: "old"},
		{Group: "prekeys", Key: "1", Value: []byte("P")},
	}})
	f := r.session.Next(t)
	if f.Type != port.TypeAck || f.ID != 3 {
		t.Fatalf("after keys the adapter sent %+v, want ack 3", f)
	}
	// The ack is written after Save returned: the store holds them now.
	want := port.Keys{"sessions": {"a": []byte("A")}, "prekeys": {"1": []byte("P")}}
	if diff := cmp.Diff(want, keys.Keys()); diff != "" {
		t.Errorf("stored keys at the ack (-want +got):\n%s", diff)
	}
}

func TestAFailedSaveIsNotAcknowledged(t *testing.T) {
	keys := porttest.NewFakeKeyStore(nil)
	r := start(t, keys, nil)
	keys.FailSave = porttest.ErrFake
	r.session.Send(t, port.Frame{Type: port.TypeKeys, ID: 1, Changes: []port.KeyChange{{Group: "g", Key: "k", Value: []byte("v")}}})
	if f := r.session.Next(t); f.Type != port.TypeNack || f.ID != 1 || f.Error == nil {
		t.Fatalf("after a failed save the adapter sent %+v, want nack 1 with an error", f)
	}
	if f := keys.Keys(); len(f) != 0 {
		t.Errorf("a failed save left %v", f)
	}
	// The session goes on: the next write is saved.
	keys.FailSave = nil
	r.session.Send(t, port.Frame{Type: port.TypeKeys, ID: 2, Changes: []port.KeyChange{{Group: "g", Key: "k", Value: []byte("v")}}})
	if f := r.session.Next(t); f.Type != port.TypeAck || f.ID != 2 {
		t.Fatalf("after a save that worked the adapter sent %+v, want ack 2", f)
	}
}

func TestAClosedStoreRefusesEveryWriteAndEndsTheSession(t *testing.T) {
	keys := porttest.NewFakeKeyStore(nil)
	r := start(t, keys, nil)
	keys.Close()
	r.session.Send(t, port.Frame{Type: port.TypeKeys, ID: 1, Changes: []port.KeyChange{{Group: "g", Key: "k", Value: []byte("v")}}})
	if f := r.session.Next(t); f.Type != port.TypeNack {
		t.Fatalf("a write to a closed store was answered %+v, want nack", f)
	}
	if f := r.session.Next(t); f.Type != port.TypeDrop {
		t.Fatalf("after a write to a closed store the adapter sent %+v, want drop", f)
	}
	if err := r.result(t); !errors.Is(err, port.ErrChannelGone) {
		t.Errorf("Run returned %v, want ErrChannelGone", err)
	}
	if err := keys.Save(context.Background(), nil); !errors.Is(err, port.ErrChannelGone) {
		t.Errorf("a closed store's Save = %v, want ErrChannelGone", err)
	}
}

func TestTheProgramsEndOfASession(t *testing.T) {
	tests := map[string]struct {
		reason     string
		wantRelink bool
	}{
		"a device logged out on the phone needs a relink": {reason: port.ReasonLoggedOut, wantRelink: true},
		"a code not scanned in time needs a relink":       {reason: port.ReasonLinkTimeout, wantRelink: true},
		"a link refused needs a relink":                   {reason: port.ReasonLinkRejected, wantRelink: true},
		"a lost connection is retried":                    {reason: port.ReasonDisconnected},
		"another failure is retried":                      {reason: port.ReasonFailed},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := start(t, nil, nil)
			r.session.Send(t, port.Frame{Type: port.TypeClosed, Reason: tc.reason})
			err := r.result(t)
			if err == nil || errors.Is(err, channels.ErrNeedsRelink) != tc.wantRelink {
				t.Errorf("closed %q: Run returned %v, want needs-relink %v", tc.reason, err, tc.wantRelink)
			}
		})
	}
}

func TestLinkCodesAreStreamedAndEnded(t *testing.T) {
	links := port.NewLinks()
	const ch = "team/whatsapp"
	r := start(t, nil, links.For(ch))

	frames := make(chan wire.ChannelLinkFrame, 16)
	watched := make(chan error, 1)
	go func() {
		watched <- links.Watch(context.Background(), ch, func(f wire.ChannelLinkFrame) error { frames <- f; return nil })
	}()
	r.session.Send(t, port.Frame{Type: port.TypeCode, Code: "2@first"})
	if f := <-frames; f.Code != "2@first" {
		t.Fatalf("first frame %+v, want the first code", f)
	}
	r.session.Send(t, port.Frame{Type: port.TypeCode, Code: "2@second"})
	if f := <-frames; f.Code != "2@second" {
		t.Fatalf("second frame %+v, want the second code", f)
	}

	// A watcher that joins late gets the code on show now.
	late := make(chan wire.ChannelLinkFrame, 1)
	lateCtx, lateCancel := context.WithCancel(context.Background())
	go func() {
		_ = links.Watch(lateCtx, ch, func(f wire.ChannelLinkFrame) error {
			select {
			case late <- f:
			default:
			}
			return nil
		})
	}()
	select {
	case f := <-late:
		if f.Code != "2@second" {
			t.Errorf("a late watcher's first frame %+v, want the code on show", f)
		}
	case <-time.After(5 * time.Second):
		t.Error("a late watcher got nothing")
	}
	lateCancel()

	r.session.Send(t, port.Frame{Type: port.TypeLinked, Account: &port.Account{ID: "4915100000000", Name: "+4915100000000"}})
	if f := <-frames; f != (wire.ChannelLinkFrame{Linked: "+4915100000000"}) {
		t.Errorf("end frame %+v, want linked with the number", f)
	}
	if err := <-watched; err != nil {
		t.Errorf("Watch returned %v after the end frame, want nil", err)
	}
	// After the end, a watcher gets the end at once.
	var after []wire.ChannelLinkFrame
	_ = links.Watch(context.Background(), ch, func(f wire.ChannelLinkFrame) error { after = append(after, f); return nil })
	if len(after) != 1 || after[0].Linked == "" {
		t.Errorf("a watcher after the end got %+v, want the end frame alone", after)
	}
}

func TestALinkThatTimesOutEndsFailedAndNeedsARelink(t *testing.T) {
	links := port.NewLinks()
	const ch = "team/whatsapp"
	links.Begin(ch)
	r := start(t, nil, links.For(ch))
	r.session.Send(t, port.Frame{Type: port.TypeCode, Code: "2@code"})
	r.session.Send(t, port.Frame{Type: port.TypeClosed, Reason: port.ReasonLinkTimeout})
	if err := r.result(t); !errors.Is(err, channels.ErrNeedsRelink) {
		t.Fatalf("Run returned %v, want needs-relink", err)
	}
	var got []wire.ChannelLinkFrame
	_ = links.Watch(context.Background(), ch, func(f wire.ChannelLinkFrame) error { got = append(got, f); return nil })
	if len(got) != 1 || got[0].Failed == "" || got[0].Code != "" {
		t.Errorf("after a timed-out link a watcher got %+v, want one failed frame and no code", got)
	}
	if strings.Contains(got[0].Failed, "2@code") {
		t.Errorf("the failed frame holds the code: %q", got[0].Failed)
	}
}

func TestSendsAskForNoPreviewAndAreSplit(t *testing.T) {
	r := start(t, nil, nil)
	waitConnected(t, r)
	long := strings.Repeat("word ", 1000) // 5000 characters: two parts
	sent := make(chan error, 1)
	go func() {
		sent <- r.adapter.SendText(context.Background(), "4915111111111@s.whatsapp.net", "see https://example.com/x?q=1\n\n"+long)
	}()
	var texts []string
	for range 2 {
		f := r.session.Next(t)
		if f.Type != port.TypeSend || !f.NoPreview || f.Chat != "4915111111111@s.whatsapp.net" {
			t.Fatalf("a send frame is %+v, want send to the chat with no_preview", f)
		}
		texts = append(texts, f.Text)
		r.session.Send(t, port.Frame{Type: port.TypeResult, ID: f.ID, Ref: "MSG"})
	}
	if err := <-sent; err != nil {
		t.Fatalf("SendText: %v", err)
	}
	if !strings.HasPrefix(texts[0], "see https://example.com/x?q=1") || len([]rune(texts[0])) > port.MaxText {
		t.Errorf("first part %.60q... (%d runes), want the start, at most %d", texts[0], len([]rune(texts[0])), port.MaxText)
	}
}

func waitConnected(t *testing.T, r *run) {
	t.Helper()
	// A typing call answers "not connected yet" until the session is set.
	waitUntil(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		err := r.adapter.Typing(ctx, "probe")
		return err == nil || !strings.Contains(err.Error(), "not connected")
	})
	// Drain the probe's typing frame.
	f := r.session.Next(t)
	if f.Type != port.TypeTyping {
		t.Fatalf("probe frame %+v, want typing", f)
	}
}

func TestTypingComesBeforeTheSend(t *testing.T) {
	r := start(t, nil, nil)
	waitConnected(t, r)
	done := make(chan error, 1)
	go func() {
		ctx := context.Background()
		// The hub's way out: typing while the Dot thinks, then the answer.
		_ = r.adapter.Typing(ctx, "c@s.whatsapp.net")
		done <- r.adapter.SendText(ctx, "c@s.whatsapp.net", "answer")
	}()
	f := r.session.Next(t)
	if f.Type != port.TypeTyping || f.Chat != "c@s.whatsapp.net" {
		t.Fatalf("first frame %+v, want typing in the chat", f)
	}
	r.session.Send(t, port.Frame{Type: port.TypeResult, ID: f.ID})
	f = r.session.Next(t)
	if f.Type != port.TypeSend || f.Text != "answer" || !f.NoPreview {
		t.Fatalf("second frame %+v, want the send with no_preview", f)
	}
	r.session.Send(t, port.Frame{Type: port.TypeResult, ID: f.ID, Ref: "M1"})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestSendFailuresInTheHubsWords(t *testing.T) {
	tests := map[string]struct {
		frame port.Frame
		call  func(a *port.Adapter) (string, error)
		check func(ref string, err error) bool
		want  string
	}{
		"a refused send is final": {
			frame: port.Frame{Error: &port.Error{Kind: port.ErrorRefused, Message: "the chat is gone"}},
			call:  func(a *port.Adapter) (string, error) { return "", a.SendText(context.Background(), "c", "x") },
			check: func(_ string, err error) bool { return errors.Is(err, channels.ErrRefused) },
			want:  "channels.ErrRefused",
		},
		"a rate limit says when": {
			frame: port.Frame{Error: &port.Error{Kind: port.ErrorRetryAfter, RetryAfterMS: 3000}},
			call:  func(a *port.Adapter) (string, error) { return "", a.SendText(context.Background(), "c", "x") },
			check: func(_ string, err error) bool {
				var ra *channels.RetryAfterError
				return errors.As(err, &ra) && ra.After == 3*time.Second
			},
			want: "RetryAfterError of 3s",
		},
		"an approval's prompt returns its message id": {
			frame: port.Frame{Ref: "3EB0ABC"},
			call: func(a *port.Adapter) (string, error) {
				return a.SendApproval(context.Background(), "c", "Approve?", "appr_1")
			},
			check: func(ref string, err error) bool { return err == nil && ref == "3EB0ABC" },
			want:  "ref 3EB0ABC",
		},
		"an edit refused for its age counts as done": {
			frame: port.Frame{Error: &port.Error{Kind: port.ErrorTooOld}},
			call: func(a *port.Adapter) (string, error) {
				return "", a.EditApproval(context.Background(), "c", "3EB0ABC", "Approved.")
			},
			check: func(_ string, err error) bool { return err == nil },
			want:  "nil",
		},
		"another failure is retried": {
			frame: port.Frame{Error: &port.Error{Kind: port.ErrorFailed, Message: "timed out"}},
			call:  func(a *port.Adapter) (string, error) { return "", a.SendText(context.Background(), "c", "x") },
			check: func(_ string, err error) bool {
				return err != nil && !errors.Is(err, channels.ErrRefused) && strings.Contains(err.Error(), "timed out")
			},
			want: "a plain error",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := start(t, nil, nil)
			waitConnected(t, r)
			type out struct {
				ref string
				err error
			}
			done := make(chan out, 1)
			go func() { ref, err := tc.call(r.adapter); done <- out{ref, err} }()
			f := r.session.Next(t)
			if (f.Type == port.TypeSend || f.Type == port.TypeEdit) && !f.NoPreview {
				t.Errorf("%s frame without no_preview", f.Type)
			}
			answer := tc.frame
			answer.Type, answer.ID = port.TypeResult, f.ID
			r.session.Send(t, answer)
			o := <-done
			if !tc.check(o.ref, o.err) {
				t.Errorf("got ref %q, err %v; want %s", o.ref, o.err, tc.want)
			}
		})
	}
}

func TestASendFromInsideInboundIsAnswered(t *testing.T) {
	r := start(t, nil, nil)
	// The hub answers a pairing from inside Inbound: the result must reach
	// the send while the message's done waits.
	r.sink.during = func(ctx context.Context) error {
		return r.adapter.SendText(ctx, "c@s.whatsapp.net", "Paired.")
	}
	r.session.Send(t, message(1, "4915111111111", "pair ABCD2345"))
	f := r.session.Next(t)
	if f.Type != port.TypeSend {
		t.Fatalf("frame %+v, want the welcome's send", f)
	}
	// Keys written while the send goes out are saved too.
	r.session.Send(t, port.Frame{Type: port.TypeKeys, ID: 9, Changes: []port.KeyChange{{Group: "sessions", Key: "c", Value: []byte("s")}}})
	if a := r.session.Next(t); a.Type != port.TypeAck || a.ID != 9 {
		t.Fatalf("frame %+v, want ack 9 while Inbound waits", a)
	}
	r.session.Send(t, port.Frame{Type: port.TypeResult, ID: f.ID, Ref: "M"})
	if d := r.session.Next(t); d.Type != port.TypeDone || d.ID != 1 {
		t.Fatalf("frame %+v, want done 1", d)
	}
}

func TestAProgramOfAnotherVersionIsRefused(t *testing.T) {
	prog := porttest.NewFakeProgram(t)
	a := port.New(port.Config{Dial: prog.Dial, Keys: porttest.NewFakeKeyStore(nil), Log: logr.Discard()})
	done := make(chan error, 1)
	go func() { done <- a.Run(context.Background(), &fakeSink{}) }()
	s := prog.AcceptWith(t, port.Frame{Type: port.TypeWelcome, V: port.Version + 1})
	defer s.Close()
	if err := <-done; !errors.Is(err, port.ErrVersion) {
		t.Errorf("Run against a program of another version returned %v, want ErrVersion", err)
	}
}

func TestSendBeforeTheSessionSaysNotConnected(t *testing.T) {
	a := port.New(port.Config{Keys: porttest.NewFakeKeyStore(nil)})
	if err := a.SendText(context.Background(), "c", "x"); err == nil || !strings.Contains(err.Error(), "not connected") {
		t.Errorf("SendText before Run = %v, want not connected", err)
	}
	if !a.ApprovalsByText() {
		t.Error("ApprovalsByText = false; WhatsApp's approvals are answered in words")
	}
}
