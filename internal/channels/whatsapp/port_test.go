package main

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"go.mau.fi/whatsmeow"
	"go.mau.fi/whatsmeow/store"
	"go.mau.fi/whatsmeow/types"
	"go.mau.fi/whatsmeow/types/events"
	waLog "go.mau.fi/whatsmeow/util/log"

	"github.com/invisible-dots/invisible-dots/internal/channels"
	"github.com/invisible-dots/invisible-dots/internal/channels/port"
	"github.com/invisible-dots/invisible-dots/internal/channels/port/porttest"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
)

// hubSink is the hub as the server's adapter sees it.
type hubSink struct {
	mu        sync.Mutex
	connected int
	inbound   []channels.Inbound
}

func (s *hubSink) Connected() { s.mu.Lock(); s.connected++; s.mu.Unlock() }
func (s *hubSink) Inbound(_ context.Context, in channels.Inbound) error {
	s.mu.Lock()
	s.inbound = append(s.inbound, in)
	s.mu.Unlock()
	return nil
}
func (s *hubSink) Pressed(context.Context, channels.Press) (string, error) { return "", nil }

// TestTheServersAdapterAndTheProgramAgree runs the server's real adapter
// (internal/channels/port) against this program's real socket loop, only
// WhatsApp faked: a link, the keys saved, a message, an answer, a logout,
// and the next start from the saved keys.
func TestTheServersAdapterAndTheProgramAgree(t *testing.T) {
	dir, err := os.MkdirTemp("", "wa")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	socket := filepath.Join(dir, port.SocketName)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clients := make(chan *fakeClient, 4)
	go func() {
		_ = run(ctx, socket, Options{
			NewClient: func(dev *store.Device, _ waLog.Logger) Client { c := &fakeClient{dev: dev}; clients <- c; return c },
			Pause:     func() time.Duration { return time.Millisecond },
			Log:       func(string, ...any) {},
			ClientLog: waLog.Noop,
		})
	}()
	dial := func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		for {
			c, err := d.DialContext(ctx, "unix", socket)
			if err == nil || ctx.Err() != nil {
				return c, err
			}
			time.Sleep(10 * time.Millisecond) // the program is not listening yet
		}
	}

	keys := porttest.NewFakeKeyStore(nil)
	links := port.NewLinks()
	const channel = "team/whatsapp"
	links.Begin(channel)
	var account channels.Account
	var accMu sync.Mutex
	a := port.New(port.Config{Dial: dial, Keys: keys, Linking: links.For(channel), Log: logr.Discard(),
		OnAccount: func(acc channels.Account) { accMu.Lock(); account = acc; accMu.Unlock() }})
	sink := &hubSink{}
	runDone := make(chan error, 1)
	ctx1, cancel1 := context.WithCancel(ctx)
	defer cancel1()
	go func() { runDone <- a.Run(ctx1, sink) }()

	c := <-clients
	waitFor(t, "linking", func() bool { return has(c.Calls(), "connect") })
	frames := make(chan wire.ChannelLinkFrame, 8)
	go func() {
		_ = links.Watch(ctx, channel, func(f wire.ChannelLinkFrame) error { frames <- f; return nil })
	}()
	c.qr <- whatsmeow.QRChannelItem{Event: whatsmeow.QRChannelEventCode, Code: "2@scan-me"}
	if f := <-frames; f.Code != "2@scan-me" {
		t.Fatalf("link frame %+v, want the code", f)
	}

	id := types.NewADJID("4915100000000", 0, 7)
	c.dev.ID = &id
	if err := c.dev.Save(context.Background()); err != nil {
		t.Fatalf("the device's save through the server: %v", err)
	}
	if _, ok := keys.Keys()[groupDevice]; !ok {
		t.Fatal("the device's save returned before the server's store had it")
	}
	c.emit(&events.PairSuccess{ID: id})
	if f := <-frames; f.Linked != "+4915100000000" {
		t.Fatalf("link frame %+v, want linked", f)
	}
	c.emit(&events.Connected{})
	waitFor(t, "connected", func() bool { sink.mu.Lock(); defer sink.mu.Unlock(); return sink.connected == 1 })
	accMu.Lock()
	if account.ID != "4915100000000" {
		t.Errorf("account heard = %+v", account)
	}
	accMu.Unlock()

	c.emit(msgEvent(anaPN, anaPhone, text("pair ABCD2345"), nil))
	sink.mu.Lock()
	got := sink.inbound
	sink.mu.Unlock()
	if len(got) != 1 || got[0].Peer != "4915111111111" || got[0].Text != "pair ABCD2345" || !got[0].Private {
		t.Fatalf("the hub got %+v", got)
	}
	if err := a.SendText(ctx, got[0].Chat, "Paired."); err != nil {
		t.Fatalf("SendText: %v", err)
	}
	if !has(c.Calls(), "send 4915111111111@s.whatsapp.net Paired.") || !has(c.Calls(), "typing 4915111111111@s.whatsapp.net true") {
		t.Errorf("calls %v, want typing and the send", c.Calls())
	}
	ref, err := a.SendApproval(ctx, got[0].Chat, "Approve? Reply \"yes ap-abcdef\"", "appr_abcdef")
	if err != nil || ref == "" {
		t.Fatalf("SendApproval = %q, %v", ref, err)
	}
	if err := a.EditApproval(ctx, got[0].Chat, ref, "Approved."); err != nil {
		t.Fatalf("EditApproval: %v", err)
	}

	// The next start comes back from the saved keys: no code, the same
	// number.
	cancel1()
	if err := <-runDone; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run after its ctx ended = %v", err)
	}
	waitFor(t, "disconnect", func() bool { return has(c.Calls(), "disconnect") })
	a2 := port.New(port.Config{Dial: dial, Keys: keys, Log: logr.Discard()})
	run2 := make(chan error, 1)
	go func() { run2 <- a2.Run(ctx, &hubSink{}) }()
	c2 := <-clients
	waitFor(t, "connect", func() bool { return has(c2.Calls(), "connect") })
	if has(c2.Calls(), "qr") || c2.dev.GetJID() != id {
		t.Errorf("from saved keys: calls %v, device %v; want no code and %v", c2.Calls(), c2.dev.GetJID(), id)
	}

	// Logged out on the phone: the keys are gone from the server's store,
	// and the Channel needs a new link.
	c2.emit(&events.LoggedOut{Reason: events.ConnectFailureLoggedOut})
	if err := <-run2; !errors.Is(err, channels.ErrNeedsRelink) {
		t.Fatalf("Run after a logout = %v, want needs-relink", err)
	}
	if k := keys.Keys(); len(k) != 0 {
		t.Errorf("after a logout the store keeps %d groups", len(k))
	}
}
