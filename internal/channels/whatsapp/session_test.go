package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mau.fi/whatsmeow"
	"go.mau.fi/whatsmeow/store"
	"go.mau.fi/whatsmeow/types"
	"go.mau.fi/whatsmeow/types/events"
	waLog "go.mau.fi/whatsmeow/util/log"

	"github.com/invisible-dots/invisible-dots/internal/channels/port"
)

// fakeClient stands for whatsmeow's client, which needs WhatsApp's
// network: it records what the session asks of it, and a test plays
// WhatsApp's events through emit.
type fakeClient struct {
	dev *store.Device

	mu       sync.Mutex
	handlers []func(any)
	calls    []string
	qr       chan whatsmeow.QRChannelItem
	sendErr  error
	sent     int
}

func (c *fakeClient) record(format string, args ...any) {
	c.mu.Lock()
	c.calls = append(c.calls, fmt.Sprintf(format, args...))
	c.mu.Unlock()
}

func (c *fakeClient) Calls() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.calls...)
}

func (c *fakeClient) AddEventHandler(h func(any)) uint32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.handlers = append(c.handlers, h)
	return uint32(len(c.handlers))
}

func (c *fakeClient) emit(evt any) {
	c.mu.Lock()
	hs := append([]func(any){}, c.handlers...)
	c.mu.Unlock()
	for _, h := range hs {
		h(evt)
	}
}

func (c *fakeClient) GetQRChannel(context.Context) (<-chan whatsmeow.QRChannelItem, error) {
	c.record("qr")
	c.mu.Lock()
	defer c.mu.Unlock()
	c.qr = make(chan whatsmeow.QRChannelItem, 8)
	return c.qr, nil
}

func (c *fakeClient) Connect() error { c.record("connect"); return nil }
func (c *fakeClient) Disconnect()    { c.record("disconnect") }

func (c *fakeClient) SendText(_ context.Context, to types.JID, text string) (types.MessageID, error) {
	c.record("send %s %s", to, text)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sendErr != nil {
		return "", c.sendErr
	}
	c.sent++
	return types.MessageID(fmt.Sprintf("3EB0%d", c.sent)), nil
}

func (c *fakeClient) EditText(_ context.Context, chat types.JID, id types.MessageID, text string) error {
	c.record("edit %s %s %s", chat, id, text)
	return nil
}

func (c *fakeClient) ChatPresence(_ context.Context, chat types.JID, typing bool) error {
	c.record("typing %s %v", chat, typing)
	return nil
}

func (c *fakeClient) MarkRead(_ context.Context, ids []types.MessageID, _ time.Time, chat, sender types.JID) error {
	c.record("read %s %s %v", chat, sender, ids)
	return nil
}

// harness is a session on a pipe, the test playing the server.
type harness struct {
	conn   *port.Conn
	frames chan port.Frame
	client chan *fakeClient
	pauses chan struct{}
	done   chan struct{}
	cancel context.CancelFunc
	// clock is the session's, moved by advance.
	mu    sync.Mutex
	clock time.Time
}

func (h *harness) now() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.clock
}

func (h *harness) advance(d time.Duration) {
	h.mu.Lock()
	h.clock = h.clock.Add(d)
	h.mu.Unlock()
}

func startSession(t *testing.T, keys port.Keys) *harness {
	t.Helper()
	server, program := net.Pipe()
	h := &harness{conn: port.NewConn(server), frames: make(chan port.Frame, 64), client: make(chan *fakeClient, 1),
		pauses: make(chan struct{}, 16), done: make(chan struct{}), clock: time.Date(2026, 12, 5, 6, 0, 0, 0, time.UTC)}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	opts := Options{
		NewClient: func(dev *store.Device, _ waLog.Logger) Client {
			c := &fakeClient{dev: dev}
			h.client <- c
			return c
		},
		Pause:     func() time.Duration { h.pauses <- struct{}{}; return time.Millisecond },
		Log:       func(string, ...any) {},
		ClientLog: waLog.Noop,
		Now:       h.now,
	}
	go func() { defer close(h.done); serve(ctx, program, opts) }()
	t.Cleanup(func() {
		cancel()
		server.Close()
		<-h.done
	})
	if err := h.conn.Write(port.Frame{Type: port.TypeHello, V: port.Version, Keys: keys}); err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			f, err := h.conn.Read()
			if err != nil {
				close(h.frames)
				return
			}
			h.frames <- f
		}
	}()
	if f := h.next(t); f.Type != port.TypeWelcome || f.V != port.Version {
		t.Fatalf("first frame %+v, want welcome v%d", f, port.Version)
	}
	return h
}

// fake is the session's client, once it made one.
func (h *harness) fake(t *testing.T) *fakeClient {
	t.Helper()
	select {
	case c := <-h.client:
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("the session made no client")
	}
	return nil
}

func (h *harness) next(t *testing.T) port.Frame {
	t.Helper()
	select {
	case f, ok := <-h.frames:
		if !ok {
			t.Fatal("the program closed the connection; a frame was expected")
		}
		return f
	case <-time.After(10 * time.Second):
		t.Fatal("the program sent no frame")
	}
	return port.Frame{}
}

func (h *harness) send(t *testing.T, f port.Frame) {
	t.Helper()
	if err := h.conn.Write(f); err != nil {
		t.Fatal(err)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10 s for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func has(calls []string, call string) bool {
	for _, c := range calls {
		if c == call {
			return true
		}
	}
	return false
}

func linkedKeys(t *testing.T) port.Keys {
	t.Helper()
	s, srv := newTestStore(nil)
	dev, _, _ := newDevice(context.Background(), s, waLog.Noop)
	id := types.NewADJID("4915100000000", 0, 7)
	dev.ID = &id
	if err := dev.Save(context.Background()); err != nil {
		t.Fatal(err)
	}
	return srv.keys
}

func TestWithoutKeysTheProgramLinks(t *testing.T) {
	h := startSession(t, nil)
	c := h.fake(t)
	waitFor(t, "connect", func() bool { return has(c.Calls(), "connect") })
	if calls := c.Calls(); calls[0] != "qr" {
		t.Fatalf("calls %v: the QR channel must be asked for before Connect", calls)
	}
	c.qr <- whatsmeow.QRChannelItem{Event: whatsmeow.QRChannelEventCode, Code: "2@one"}
	c.qr <- whatsmeow.QRChannelItem{Event: whatsmeow.QRChannelEventCode, Code: "2@two"}
	for _, want := range []string{"2@one", "2@two"} {
		if f := h.next(t); f.Type != port.TypeCode || f.Code != want {
			t.Fatalf("frame %+v, want code %s", f, want)
		}
	}
	// The phone scans: whatsmeow saves the device (a keys frame, waited
	// on), then says PairSuccess.
	saved := make(chan error, 1)
	go func() {
		id := types.NewADJID("4915100000000", 0, 7)
		c.dev.ID = &id
		saved <- c.dev.Save(context.Background())
	}()
	f := h.next(t)
	if f.Type != port.TypeKeys || len(f.Changes) != 1 || f.Changes[0].Group != groupDevice {
		t.Fatalf("frame %+v, want the device's keys", f.Type)
	}
	select {
	case err := <-saved:
		t.Fatalf("the device's save returned (%v) before the server acknowledged it", err)
	case <-time.After(50 * time.Millisecond):
	}
	h.send(t, port.Frame{Type: port.TypeAck, ID: f.ID})
	if err := <-saved; err != nil {
		t.Fatalf("save after ack: %v", err)
	}
	c.emit(&events.PairSuccess{ID: types.NewADJID("4915100000000", 0, 7)})
	if f := h.next(t); f.Type != port.TypeLinked || f.Account == nil || f.Account.ID != "4915100000000" || f.Account.Name != "+4915100000000" {
		t.Fatalf("frame %+v, want linked with the number", f)
	}
	c.emit(&events.Connected{})
	if f := h.next(t); f.Type != port.TypeConnected || f.Account.ID != "4915100000000" {
		t.Fatalf("frame %+v, want connected", f)
	}
}

func TestALinkThatTimesOutIsClosed(t *testing.T) {
	h := startSession(t, nil)
	c := h.fake(t)
	waitFor(t, "connect", func() bool { return has(c.Calls(), "connect") })
	c.qr <- whatsmeow.QRChannelTimeout
	if f := h.next(t); f.Type != port.TypeClosed || f.Reason != port.ReasonLinkTimeout {
		t.Fatalf("frame %+v, want closed link_timeout", f)
	}
	waitFor(t, "disconnect", func() bool { return has(c.Calls(), "disconnect") })
}

func TestKeysOfALinkThatDidNotFinishAreDeletedFirst(t *testing.T) {
	h := startSession(t, port.Keys{groupPreKeys: {"1": []byte(`{"priv":"AAAA"}`)}})
	f := h.next(t)
	if f.Type != port.TypeKeys {
		t.Fatalf("frame %+v, want keys deleting the old link's", f)
	}
	for _, c := range f.Changes {
		if c.Value != nil || c.Key != "" {
			t.Errorf("change %+v is not a group's delete", c)
		}
	}
	h.send(t, port.Frame{Type: port.TypeAck, ID: f.ID})
	// Then the new device links.
	c := h.fake(t)
	waitFor(t, "linking", func() bool { return has(c.Calls(), "qr") })
}

func TestALinkedDeviceConnectsWithoutACode(t *testing.T) {
	h := startSession(t, linkedKeys(t))
	c := h.fake(t)
	waitFor(t, "connect", func() bool { return has(c.Calls(), "connect") })
	if has(c.Calls(), "qr") {
		t.Error("a linked device asked for a QR code")
	}
	c.emit(&events.Connected{})
	if f := h.next(t); f.Type != port.TypeConnected || f.Account.ID != "4915100000000" {
		t.Fatalf("frame %+v, want connected as the saved number", f)
	}
	// Logged out on the phone: the keys are deleted on the server, then
	// the session says why it ends.
	go c.emit(&events.LoggedOut{Reason: events.ConnectFailureLoggedOut})
	f := h.next(t)
	if f.Type != port.TypeKeys || len(f.Changes) == 0 {
		t.Fatalf("frame %+v, want the keys' deletion", f)
	}
	for _, ch := range f.Changes {
		if ch.Key != "" || ch.Value != nil {
			t.Errorf("change %+v is not a group's delete", ch)
		}
	}
	h.send(t, port.Frame{Type: port.TypeAck, ID: f.ID})
	if f := h.next(t); f.Type != port.TypeClosed || f.Reason != port.ReasonLoggedOut {
		t.Fatalf("frame %+v, want closed logged_out", f)
	}
}

func TestMessagesComeOneAtATime(t *testing.T) {
	h := startSession(t, linkedKeys(t))
	c := h.fake(t)
	waitFor(t, "connect", func() bool { return has(c.Calls(), "connect") })
	first := make(chan struct{})
	go func() {
		c.emit(msgEvent(anaPN, anaPhone, text("one"), nil))
		close(first)
		c.emit(msgEvent(anaPN, anaPhone, text("two"), func(e *events.Message) { e.Info.ID = "3EB0BBB" }))
	}()
	f := h.next(t)
	if f.Type != port.TypeMessage || f.Message.Text != "one" {
		t.Fatalf("frame %+v, want the first message", f)
	}
	select {
	case <-first:
		t.Fatal("whatsmeow's handler returned before the server's done")
	case <-time.After(50 * time.Millisecond):
	}
	h.send(t, port.Frame{Type: port.TypeDone, ID: f.ID})
	f2 := h.next(t)
	if f2.Type != port.TypeMessage || f2.Message.Text != "two" {
		t.Fatalf("frame %+v, want the second message after the first's done", f2)
	}
	// A group's message never reaches the server.
	h.send(t, port.Frame{Type: port.TypeDone, ID: f2.ID})
	c.emit(msgEvent(types.NewJID("1203630", types.GroupServer), anaPN, text("all"), func(e *events.Message) { e.Info.IsGroup = true }))
	c.emit(&events.Disconnected{})
	if f := h.next(t); f.Type != port.TypeClosed || f.Reason != port.ReasonDisconnected {
		t.Fatalf("frame %+v, want closed disconnected (and no group message)", f)
	}
}

func TestADropEndsTheSession(t *testing.T) {
	h := startSession(t, linkedKeys(t))
	c := h.fake(t)
	waitFor(t, "connect", func() bool { return has(c.Calls(), "connect") })
	handled := make(chan struct{})
	go func() {
		c.emit(msgEvent(anaPN, anaPhone, text("one"), nil))
		close(handled)
	}()
	h.next(t)
	h.send(t, port.Frame{Type: port.TypeDrop, Reason: "the server could not record a message"})
	select {
	case <-handled:
	case <-time.After(10 * time.Second):
		t.Fatal("the message's handler still waits after the drop")
	}
	waitFor(t, "disconnect", func() bool { return has(c.Calls(), "disconnect") })
	select {
	case <-h.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the session did not end after a drop")
	}
}

func TestASendIsReadMarkTypingPauseSend(t *testing.T) {
	h := startSession(t, linkedKeys(t))
	c := h.fake(t)
	waitFor(t, "connect", func() bool { return has(c.Calls(), "connect") })

	h.send(t, port.Frame{Type: port.TypeSend, ID: 1, Chat: "4915111111111@s.whatsapp.net", Text: "x", NoPreview: true})
	if f := h.next(t); f.Error == nil || f.Error.Kind != port.ErrorNotConnected {
		t.Fatalf("a send before Connected: %+v, want not_connected", f)
	}
	c.emit(&events.Connected{})
	h.next(t)

	// A message arrives: nothing is marked read yet.
	go c.emit(msgEvent(anaPN, anaPhone, text("hello"), nil))
	m := h.next(t)
	h.send(t, port.Frame{Type: port.TypeDone, ID: m.ID})
	for _, call := range c.Calls() {
		if strings.HasPrefix(call, "read") {
			t.Fatalf("a message was marked read on arrival: %v", c.Calls())
		}
	}

	h.send(t, port.Frame{Type: port.TypeSend, ID: 2, Chat: m.Message.Chat, Text: "answer https://example.com", NoPreview: true})
	r := h.next(t)
	if r.Type != port.TypeResult || r.ID != 2 || r.Error != nil || r.Ref == "" {
		t.Fatalf("result %+v, want the sent message's id", r)
	}
	select {
	case <-h.pauses:
	default:
		t.Error("no pause before the send")
	}
	chat := "4915111111111@s.whatsapp.net"
	want := []string{
		"read " + chat + " " + chat + " [3EB0AAA]",
		"typing " + chat + " true",
		"send " + chat + " answer https://example.com",
		"typing " + chat + " false",
	}
	calls := c.Calls()
	var got []string
	for _, call := range calls {
		if strings.HasPrefix(call, "read") || strings.HasPrefix(call, "typing") || strings.HasPrefix(call, "send") {
			got = append(got, call)
		}
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("calls:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// A second send to the chat marks nothing read again.
	h.send(t, port.Frame{Type: port.TypeSend, ID: 3, Chat: chat, Text: "more", NoPreview: true})
	h.next(t)
	reads := 0
	for _, call := range c.Calls() {
		if strings.HasPrefix(call, "read") {
			reads++
		}
	}
	if reads != 1 {
		t.Errorf("%d read marks, want 1", reads)
	}

	// Without no_preview, nothing is sent.
	h.send(t, port.Frame{Type: port.TypeSend, ID: 4, Chat: chat, Text: "x"})
	if f := h.next(t); f.Error == nil || f.Error.Kind != port.ErrorRefused {
		t.Errorf("a send without no_preview: %+v, want refused", f)
	}
	// A group is no chat the program sends to.
	h.send(t, port.Frame{Type: port.TypeSend, ID: 5, Chat: "1203630@g.us", Text: "x", NoPreview: true})
	if f := h.next(t); f.Error == nil || f.Error.Kind != port.ErrorRefused {
		t.Errorf("a send to a group: %+v, want refused", f)
	}
	// Typing alone, and an edit of a recent message.
	h.send(t, port.Frame{Type: port.TypeTyping, ID: 6, Chat: chat})
	if f := h.next(t); f.Error != nil {
		t.Errorf("typing: %+v", f)
	}
	h.send(t, port.Frame{Type: port.TypeEdit, ID: 7, Chat: chat, Ref: r.Ref, Text: "Approved.", NoPreview: true})
	if f := h.next(t); f.Error != nil || !has(c.Calls(), "edit "+chat+" "+r.Ref+" Approved.") {
		t.Errorf("edit: %+v, calls %v", f, c.Calls())
	}
}

func TestAnEditPastWhatsAppsWindowIsTooOld(t *testing.T) {
	h := startSession(t, linkedKeys(t))
	c := h.fake(t)
	waitFor(t, "connect", func() bool { return has(c.Calls(), "connect") })
	c.emit(&events.Connected{})
	h.next(t)
	h.send(t, port.Frame{Type: port.TypeSend, ID: 1, Chat: "4915111111111@s.whatsapp.net", Text: "Approve?", NoPreview: true})
	r := h.next(t)
	h.advance(16 * time.Minute)
	h.send(t, port.Frame{Type: port.TypeEdit, ID: 2, Chat: "4915111111111@s.whatsapp.net", Ref: r.Ref, Text: "Approved.", NoPreview: true})
	if f := h.next(t); f.Error == nil || f.Error.Kind != port.ErrorTooOld {
		t.Errorf("an edit after 16 minutes: %+v, want too_old", f)
	}
}

func TestSendFailures(t *testing.T) {
	tests := map[string]struct {
		err  error
		want string
	}{
		"not connected": {whatsmeow.ErrNotConnected, port.ErrorNotConnected},
		"not a chat":    {whatsmeow.ErrUnknownServer, port.ErrorRefused},
		"rate limit":    {whatsmeow.ErrIQRateOverLimit, port.ErrorRetryAfter},
		"anything else": {errors.New("timed out"), port.ErrorFailed},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if f := sendFailure(tc.err); f.Error == nil || f.Error.Kind != tc.want {
				t.Errorf("sendFailure(%v) = %+v, want %s", tc.err, f.Error, tc.want)
			}
		})
	}
}

func TestAnotherVersionIsAnsweredWithOurs(t *testing.T) {
	server, program := net.Pipe()
	defer server.Close()
	go serve(context.Background(), program, Options{Log: func(string, ...any) {}})
	conn := port.NewConn(server)
	_ = conn.Write(port.Frame{Type: port.TypeHello, V: port.Version + 1})
	f, err := conn.Read()
	if err != nil || f.Type != port.TypeWelcome || f.V != port.Version {
		t.Fatalf("welcome %+v, %v; want this program's version", f, err)
	}
	if _, err := conn.Read(); err == nil {
		t.Error("the program went on with a server of another version")
	}
}

func TestTheProgramListensAndServes(t *testing.T) {
	dir, err := os.MkdirTemp("", "wa")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	socket := filepath.Join(dir, port.SocketName)
	ctx, cancel := context.WithCancel(context.Background())
	clients := make(chan *fakeClient, 2)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, socket, Options{
			NewClient: func(dev *store.Device, _ waLog.Logger) Client { c := &fakeClient{dev: dev}; clients <- c; return c },
			Pause:     func() time.Duration { return 0 },
			Log:       func(string, ...any) {},
			ClientLog: waLog.Noop,
		})
	}()
	var nc net.Conn
	waitFor(t, "the socket", func() bool { nc, err = net.Dial("unix", socket); return err == nil })
	if st, err := os.Stat(socket); err != nil || st.Mode().Perm()&0o077 != 0 {
		t.Errorf("the socket's mode is %v (%v), want the owner's alone", st.Mode().Perm(), err)
	}
	conn := port.NewConn(nc)
	_ = conn.Write(port.Frame{Type: port.TypeHello, V: port.Version})
	if f, err := conn.Read(); err != nil || f.Type != port.TypeWelcome {
		t.Fatalf("welcome: %+v, %v", f, err)
	}
	c := <-clients
	waitFor(t, "linking", func() bool { return has(c.Calls(), "qr") && has(c.Calls(), "connect") })
	cancel()
	if err := <-done; err != nil {
		t.Errorf("run after its ctx ended: %v", err)
	}
	if !has(c.Calls(), "disconnect") {
		t.Error("the session's client was not disconnected at the stop")
	}
}

// TestTheProgramBuilds builds the real program (whatsmeow and all) and runs
// it without a socket, which says how it is started; it never connects.
func TestTheProgramBuilds(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the program")
	}
	bin := filepath.Join(t.TempDir(), port.ProgramName)
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin).CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), "INVISIBLE_DOTS_WHATSAPP=1") {
		t.Errorf("the program without --socket: %v, %q; want exit 2 saying how it is started", err, out)
	}
}
