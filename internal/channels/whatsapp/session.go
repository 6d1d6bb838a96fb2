package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"go.mau.fi/whatsmeow"
	"go.mau.fi/whatsmeow/store"
	"go.mau.fi/whatsmeow/types"
	"go.mau.fi/whatsmeow/types/events"
	waLog "go.mau.fi/whatsmeow/util/log"

	"github.com/invisible-dots/invisible-dots/internal/channels/port"
)

// editWindow is how long WhatsApp lets a sent message be edited.
const editWindow = 15 * time.Minute

// helloWait bounds the wait for the server's hello.
const helloWait = 30 * time.Second

// Options are a session's seams: the client, the pause before a send, the
// log. The program uses the real ones (defaultOptions).
type Options struct {
	NewClient NewClient
	// Pause is the wait between typing and a send (0.4 to 1.5 s).
	Pause func() time.Duration
	// Log is the program's log (never a key, a code or a message's text).
	Log func(format string, args ...any)
	// ClientLog is whatsmeow's.
	ClientLog waLog.Logger
	// Now is the clock (the edit window); nil is time.Now.
	Now func() time.Time
}

func (o Options) now() time.Time {
	if o.Now == nil {
		return time.Now()
	}
	return o.Now()
}

func humanPause() time.Duration {
	return 400*time.Millisecond + time.Duration(rand.Int64N(int64(1100*time.Millisecond)))
}

// session is one connection of the server: one device, from hello to the
// end of either side.
type session struct {
	conn *port.Conn
	opts Options

	// calls are its keys and message frames, answered by ack, nack and
	// done; ended when the session ends, for any reason.
	*port.Calls

	store     *deviceStore
	dev       *store.Device
	client    Client
	connected atomic.Bool
	unread    *unread
	sent      *sentTimes
}

// serve runs one session on nc until the server or WhatsApp ends it.
func serve(ctx context.Context, nc net.Conn, opts Options) {
	conn := port.NewConn(nc)
	defer conn.Close()
	s := &session{
		conn: conn, opts: opts, Calls: port.NewCalls(conn),
		unread: newUnread(256, 50), sent: newSentTimes(1024),
	}
	_ = nc.SetReadDeadline(time.Now().Add(helloWait))
	hello, err := conn.Read()
	if err != nil || hello.Type != port.TypeHello {
		s.opts.Log("a connection did not open with a hello; it is closed")
		return
	}
	_ = nc.SetReadDeadline(time.Time{})
	// The server refuses another version when it reads the welcome.
	if err := conn.Write(port.Frame{Type: port.TypeWelcome, V: port.Version}); err != nil || hello.V != port.Version {
		return
	}
	// The session's own context: what it started (the QR channel's
	// watch among them) ends with it.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	requests := make(chan port.Frame, 64)
	go s.read(requests)
	go s.work(ctx, requests)
	stop := context.AfterFunc(ctx, func() { s.end() })
	defer stop()

	if err := s.start(ctx, hello.Keys); err != nil {
		s.close(port.ReasonFailed, err.Error())
	}
	<-s.Ended()
	if s.client != nil {
		s.client.Disconnect()
	}
	cancel()
}

// start builds the device from the keys and connects it, linking it first
// when the keys hold none.
func (s *session) start(ctx context.Context, keys port.Keys) error {
	s.store = &deviceStore{kv: newKV(keys, s.saveKeys)}
	dev, linked, err := newDevice(ctx, s.store, s.opts.ClientLog)
	if err != nil {
		return err
	}
	if !linked && len(s.store.kv.snapshot()) > 0 {
		// Keys without a linked device are a link that did not finish:
		// every key of it goes before a new device links.
		if err := s.store.DeleteDevice(ctx, dev); err != nil {
			return fmt.Errorf("the keys of a link that did not finish could not be deleted: %w", err)
		}
	}
	s.dev = dev
	s.client = s.opts.NewClient(dev, s.opts.ClientLog)
	s.client.AddEventHandler(s.handle)
	if !linked {
		qr, err := s.client.GetQRChannel(ctx)
		if err != nil {
			return fmt.Errorf("linking could not start: %w", err)
		}
		go s.watchQR(qr)
	}
	if err := s.client.Connect(); err != nil {
		return fmt.Errorf("WhatsApp could not be reached: %w", err)
	}
	return nil
}

// read routes the server's frames: answers to whoever waits on them,
// requests to the worker, a drop or the connection's end to the session's.
func (s *session) read(requests chan<- port.Frame) {
	defer s.end()
	for {
		f, err := s.conn.Read()
		if err != nil {
			return
		}
		switch f.Type {
		case port.TypeAck, port.TypeNack, port.TypeDone:
			s.Answer(f)
		case port.TypeSend, port.TypeEdit, port.TypeTyping:
			select {
			case requests <- f:
			case <-s.Ended():
				return
			}
		case port.TypeDrop:
			s.opts.Log("the server dropped the session: %s", f.Reason)
			return
		default:
			s.opts.Log("a frame of type %q is not one this program reads; it is ignored", f.Type)
		}
	}
}

func (s *session) end() { s.End() }

// close tells the server why the session ends, and ends it.
func (s *session) close(reason, detail string) {
	select {
	case <-s.Ended():
		return
	default:
	}
	f := port.Frame{Type: port.TypeClosed, Reason: reason}
	if detail != "" {
		f.Error = &port.Error{Kind: port.ErrorFailed, Message: detail}
	}
	_ = s.conn.Write(f)
	s.end()
}

// call sends f and waits for its answer (ack, nack, done), the end, or
// ctx.
func (s *session) call(ctx context.Context, f port.Frame) (port.Frame, error) {
	r, err := s.Call(ctx, f)
	if errors.Is(err, port.ErrEnded) {
		return r, errSessionEnded
	}
	return r, err
}

var errSessionEnded = errors.New("the session with the server ended")

// saveKeys is the store's Saver: a keys frame, answered once the server
// saved them. whatsmeow's write waits here.
func (s *session) saveKeys(ctx context.Context, changes []port.KeyChange) error {
	r, err := s.call(ctx, port.Frame{Type: port.TypeKeys, Changes: changes})
	if err != nil {
		return err
	}
	if r.Type != port.TypeAck {
		return fmt.Errorf("the server did not save the device's keys: %s", r.Error.Error())
	}
	return nil
}

// watchQR passes the link's codes to the server until it ends.
func (s *session) watchQR(qr <-chan whatsmeow.QRChannelItem) {
	for item := range qr {
		switch {
		case item.Event == whatsmeow.QRChannelEventCode:
			_ = s.conn.Write(port.Frame{Type: port.TypeCode, Code: item.Code})
		case item == whatsmeow.QRChannelSuccess:
			// PairSuccess says linked; Connected follows.
		case item == whatsmeow.QRChannelTimeout:
			s.close(port.ReasonLinkTimeout, "")
			return
		case item == whatsmeow.QRChannelClientOutdated:
			s.close(port.ReasonFailed, "WhatsApp refuses this program's client as outdated: build the program again from a newer release")
			return
		case item.Event == whatsmeow.QRChannelEventError:
			s.close(port.ReasonLinkRejected, "")
			return
		default:
			s.close(port.ReasonLinkRejected, "")
			return
		}
	}
}

func accountOf(jid types.JID) *port.Account {
	return &port.Account{ID: jid.User, Name: "+" + jid.User}
}

// handle is whatsmeow's event handler. whatsmeow calls it for one event
// at a time, so a message waits here until the server dealt with it and
// the next comes after.
func (s *session) handle(evt any) {
	switch e := evt.(type) {
	case *events.PairSuccess:
		_ = s.conn.Write(port.Frame{Type: port.TypeLinked, Account: accountOf(e.ID)})
	case *events.PairError:
		s.close(port.ReasonLinkRejected, "")
	case *events.Connected:
		s.connected.Store(true)
		_ = s.conn.Write(port.Frame{Type: port.TypeConnected, Account: accountOf(s.dev.GetJID())})
	case *events.LoggedOut:
		s.loggedOut()
	case *events.ConnectFailure:
		if e.Reason.IsLoggedOut() {
			s.loggedOut()
			return
		}
		s.close(port.ReasonFailed, fmt.Sprintf("WhatsApp refused the connection (%d)", int(e.Reason)))
	case *events.TemporaryBan:
		s.close(port.ReasonFailed, "WhatsApp banned the account for a while: "+e.String())
	case *events.ClientOutdated:
		s.close(port.ReasonFailed, "WhatsApp refuses this program's client as outdated: build the program again from a newer release")
	case *events.StreamReplaced:
		s.close(port.ReasonFailed, "another program connected with this device's keys")
	case *events.Disconnected:
		s.connected.Store(false)
		s.close(port.ReasonDisconnected, "")
	case *events.Message:
		s.message(e)
	}
}

// loggedOut forgets the device's keys on the server before it says so:
// they are worth nothing now, and a leak of them is still a leak.
// whatsmeow deletes them too, but from a goroutine of its own that can
// lose the race with the end of the session.
func (s *session) loggedOut() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.store.DeleteDevice(ctx, s.dev); err != nil {
		s.opts.Log("the keys of a logged-out device could not be deleted: %v", err)
	}
	s.close(port.ReasonLoggedOut, "")
}

// message hands a message the server hears to it and waits until it was
// dealt with; a drop ends the session (at most once: it is never offered
// again).
func (s *session) message(e *events.Message) {
	ctx := context.Background()
	m, ok := readMessage(ctx, e, s.dev.GetJID(), s.store.GetPNForLID)
	if !ok {
		return
	}
	s.unread.add(e.Info.Chat.ToNonAD(), e.Info.Sender.ToNonAD(), e.Info.ID)
	// The answer is done, or the end of the session (a drop): either way
	// the message is not offered again.
	_, _ = s.call(ctx, port.Frame{Type: port.TypeMessage, Message: &m})
}

// work does the server's requests one at a time, in order.
func (s *session) work(ctx context.Context, requests <-chan port.Frame) {
	for {
		select {
		case <-s.Ended():
			return
		case f := <-requests:
			r := s.do(ctx, f)
			r.Type, r.ID = port.TypeResult, f.ID
			if err := s.conn.Write(r); err != nil {
				s.end()
				return
			}
		}
	}
}

// do carries out one send, edit or typing.
func (s *session) do(ctx context.Context, f port.Frame) port.Frame {
	if (f.Type == port.TypeSend || f.Type == port.TypeEdit) && !f.NoPreview {
		return failure(port.ErrorRefused, "a send or edit without no_preview is refused: this program sends no link preview")
	}
	chat, err := types.ParseJID(f.Chat)
	if err != nil || (chat.Server != types.DefaultUserServer && chat.Server != types.HiddenUserServer) {
		return failure(port.ErrorRefused, "the chat is not a person's WhatsApp address")
	}
	chat = chat.ToNonAD()
	// connected is set by whatsmeow's handler, after the client exists:
	// reading it first orders the read of s.client after its write.
	if !s.connected.Load() || s.client == nil {
		return failure(port.ErrorNotConnected, "WhatsApp is not connected yet")
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	switch f.Type {
	case port.TypeTyping:
		if err := s.client.ChatPresence(ctx, chat, true); err != nil {
			return sendFailure(err)
		}
		return port.Frame{}
	case port.TypeEdit:
		if at, ok := s.sent.when(f.Ref); ok && s.opts.now().Sub(at) > editWindow {
			return failure(port.ErrorTooOld, "WhatsApp no longer lets this message be edited")
		}
		if err := s.client.EditText(ctx, chat, f.Ref, f.Text); err != nil {
			return sendFailure(err)
		}
		return port.Frame{Ref: f.Ref}
	}
	// A send: the chat's unread messages are marked read now, as the Dot
	// answers (never before: no stranger learns the number is alive), then
	// typing and a pause, as a person would.
	if ids, sender := s.unread.take(chat); len(ids) > 0 {
		if err := s.client.MarkRead(ctx, ids, time.Now(), chat, sender); err != nil {
			s.opts.Log("marking a chat read failed: %v", err)
		}
	}
	_ = s.client.ChatPresence(ctx, chat, true)
	select {
	case <-time.After(s.opts.Pause()):
	case <-s.Ended():
		return failure(port.ErrorFailed, "the session ended")
	}
	id, err := s.client.SendText(ctx, chat, f.Text)
	_ = s.client.ChatPresence(ctx, chat, false)
	if err != nil {
		return sendFailure(err)
	}
	s.sent.add(id, s.opts.now())
	return port.Frame{Ref: id}
}

func failure(kind, message string) port.Frame {
	return port.Frame{Error: &port.Error{Kind: kind, Message: message}}
}

// sendFailure words whatsmeow's error for the server.
func sendFailure(err error) port.Frame {
	switch {
	case errors.Is(err, whatsmeow.ErrNotConnected), errors.Is(err, whatsmeow.ErrNotLoggedIn):
		return failure(port.ErrorNotConnected, "WhatsApp is not connected")
	case errors.Is(err, whatsmeow.ErrUnknownServer), errors.Is(err, whatsmeow.ErrRecipientADJID),
		errors.Is(err, whatsmeow.ErrBroadcastListUnsupported):
		return failure(port.ErrorRefused, err.Error())
	case errors.Is(err, whatsmeow.ErrIQRateOverLimit):
		return port.Frame{Error: &port.Error{Kind: port.ErrorRetryAfter, RetryAfterMS: 30_000, Message: "WhatsApp asks to slow down"}}
	}
	return failure(port.ErrorFailed, err.Error())
}

// unread remembers, per chat, the messages not marked read yet, bounded
// (chats and messages per chat): marking read is a courtesy, not a record.
type unread struct {
	mu      sync.Mutex
	chats   map[types.JID]*unreadChat
	order   []types.JID
	maxChat int
	maxIDs  int
}

type unreadChat struct {
	sender types.JID
	ids    []types.MessageID
}

func newUnread(maxChats, maxIDs int) *unread {
	return &unread{chats: map[types.JID]*unreadChat{}, maxChat: maxChats, maxIDs: maxIDs}
}

func (u *unread) add(chat, sender types.JID, id types.MessageID) {
	u.mu.Lock()
	defer u.mu.Unlock()
	c := u.chats[chat]
	if c == nil {
		if len(u.order) >= u.maxChat {
			delete(u.chats, u.order[0])
			u.order = u.order[1:]
		}
		c = &unreadChat{}
		u.chats[chat] = c
		u.order = append(u.order, chat)
	}
	c.sender = sender
	c.ids = append(c.ids, id)
	if len(c.ids) > u.maxIDs {
		c.ids = c.ids[len(c.ids)-u.maxIDs:]
	}
}

func (u *unread) take(chat types.JID) ([]types.MessageID, types.JID) {
	u.mu.Lock()
	defer u.mu.Unlock()
	c := u.chats[chat]
	if c == nil {
		return nil, types.EmptyJID
	}
	delete(u.chats, chat)
	for i, j := range u.order {
		if j == chat {
			u.order = append(u.order[:i], u.order[i+1:]...)
			break
		}
	}
	return c.ids, c.sender
}

// sentTimes remembers when this program sent a message (bounded), for the
// edit window.
type sentTimes struct {
	mu    sync.Mutex
	at    map[types.MessageID]time.Time
	order []types.MessageID
	max   int
}

func newSentTimes(max int) *sentTimes {
	return &sentTimes{at: map[types.MessageID]time.Time{}, max: max}
}

func (s *sentTimes) add(id types.MessageID, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.order) >= s.max {
		delete(s.at, s.order[0])
		s.order = s.order[1:]
	}
	s.at[id] = at
	s.order = append(s.order, id)
}

func (s *sentTimes) when(id types.MessageID) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.at[id]
	return t, ok
}
