package port

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/invisible-dots/invisible-dots/internal/channels"
)

// helloWait bounds the wait for the program's welcome.
const helloWait = 30 * time.Second

// MaxText is where an answer is split: WhatsApp takes far more, but a
// long message is folded behind "Read more" on the phone.
const MaxText = 4000

// Config is what an Adapter needs of the server for one Channel.
type Config struct {
	// Dial reaches the program's socket (Program.Dial).
	Dial func(ctx context.Context) (net.Conn, error)
	// Keys keeps the device's state.
	Keys KeyStore
	// Linking hears the codes and the end of a link (Links.For), or nil.
	Linking Linking
	// OnAccount hears the account once the device is linked or connected,
	// so the Channel's status can name it; or nil.
	OnAccount func(channels.Account)
	Log       logr.Logger
}

// Adapter is a WhatsApp Channel's link as the hub drives it (hub.Adapter),
// through the program's socket. It holds no policy: the hub decides who is
// answered and what is sent.
type Adapter struct {
	cfg Config

	mu   sync.Mutex
	sess *session
}

// New makes the adapter of one Channel; it makes no call. The hub makes a
// fresh one for each start.
func New(cfg Config) *Adapter { return &Adapter{cfg: cfg} }

// ApprovalsByText says the hub asks and reads approvals in words: WhatsApp
// has no buttons a linked device can send.
func (a *Adapter) ApprovalsByText() bool { return true }

// session is one connection to the program, from hello to its end: its
// calls (send, edit, typing) are answered by result frames.
type session struct {
	conn *Conn
	*Calls
}

func (s *session) call(ctx context.Context, f Frame) (Frame, error) {
	r, err := s.Call(ctx, f)
	if errors.Is(err, ErrEnded) {
		return r, errors.New("the connection to the WhatsApp program ended before it answered")
	}
	return r, err
}

// queue is an unbounded FIFO of frames: the reader never waits on the run
// loop, which may be inside the hub's Inbound, itself waiting for a send's
// result the reader must hand over.
type queue struct {
	mu     sync.Mutex
	frames []Frame
	err    error
	ready  chan struct{}
}

func newQueue() *queue { return &queue{ready: make(chan struct{}, 1)} }

func (q *queue) push(f Frame) {
	q.mu.Lock()
	q.frames = append(q.frames, f)
	q.mu.Unlock()
	q.wake()
}

func (q *queue) end(err error) {
	q.mu.Lock()
	q.err = err
	q.mu.Unlock()
	q.wake()
}

func (q *queue) wake() {
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// pop returns the next frame, or the error that ended the stream once
// every frame before it was taken.
func (q *queue) pop(ctx context.Context) (Frame, error) {
	for {
		q.mu.Lock()
		if len(q.frames) > 0 {
			f := q.frames[0]
			q.frames = q.frames[1:]
			q.mu.Unlock()
			return f, nil
		}
		err := q.err
		q.mu.Unlock()
		if err != nil {
			return Frame{}, err
		}
		select {
		case <-ctx.Done():
			return Frame{}, ctx.Err()
		case <-q.ready:
		}
	}
}

// Run links or connects the device and delivers its messages to sink until
// ctx ends or the session does. It returns channels.ErrNeedsRelink when
// WhatsApp no longer accepts the device (logged out on the phone, a link
// that timed out or was refused), and an error after dropping the
// connection when the hub could not record a message: WhatsApp confirmed
// it to its sender already, so it is not offered again (at most once).
func (a *Adapter) Run(ctx context.Context, sink channels.Sink) error {
	keys, err := a.cfg.Keys.Load(ctx)
	if err != nil {
		return fmt.Errorf("reading the WhatsApp device's keys: %w", err)
	}
	nc, err := a.cfg.Dial(ctx)
	if err != nil {
		return fmt.Errorf("the WhatsApp program cannot be reached: %w", err)
	}
	conn := NewConn(nc)
	defer conn.Close()
	// Everything this run starts ends with it, whoever ends it; a read
	// blocked on the socket ends with ctx.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()

	// A program that takes the connection and says nothing is not waited
	// on for ever.
	_ = nc.SetDeadline(time.Now().Add(helloWait))
	if err := conn.Write(Frame{Type: TypeHello, V: Version, Keys: keys}); err != nil {
		return fmt.Errorf("the WhatsApp program cannot be reached: %w", err)
	}
	welcome, err := conn.Read()
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("the WhatsApp program did not answer: %w", err)
	}
	if welcome.Type != TypeWelcome || welcome.V != Version {
		return ErrVersion
	}
	_ = nc.SetDeadline(time.Time{})

	s := &session{conn: conn, Calls: NewCalls(conn)}
	a.mu.Lock()
	a.sess = s
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		a.sess = nil
		a.mu.Unlock()
	}()

	main := newQueue()
	keysQ := newQueue()
	go func() {
		defer s.End()
		for {
			f, err := conn.Read()
			if err != nil {
				main.end(err)
				keysQ.end(err)
				return
			}
			switch f.Type {
			case TypeResult:
				s.Answer(f)
			case TypeKeys:
				keysQ.push(f)
			default:
				main.push(f)
			}
		}
	}()

	// Keys are saved apart from the run loop, in order: a send the hub
	// makes from inside Inbound can need a key written before it goes.
	gone := make(chan error, 1)
	go func() {
		for {
			f, err := keysQ.pop(ctx)
			if err != nil {
				return
			}
			if err := a.cfg.Keys.Save(ctx, f.Changes); err != nil {
				_ = conn.Write(Frame{Type: TypeNack, ID: f.ID, Error: &Error{Kind: ErrorFailed, Message: "the server could not save the device's keys"}})
				if errors.Is(err, ErrChannelGone) {
					gone <- err
					return
				}
				a.cfg.Log.Info("the WhatsApp device's keys could not be saved; the program's write fails", "err", err.Error())
				continue
			}
			if err := conn.Write(Frame{Type: TypeAck, ID: f.ID}); err != nil {
				return
			}
		}
	}()

	frames := make(chan Frame)
	readErr := make(chan error, 1)
	go func() {
		for {
			f, err := main.pop(ctx)
			if err != nil {
				readErr <- err
				return
			}
			select {
			case frames <- f:
			case <-ctx.Done():
				return
			}
		}
	}()

	connected := false
	for {
		select {
		case <-ctx.Done():
			_ = conn.Write(Frame{Type: TypeDrop, Reason: "the channel stops"})
			return ctx.Err()
		case err := <-gone:
			_ = conn.Write(Frame{Type: TypeDrop, Reason: "the channel was deleted"})
			return err
		case err := <-readErr:
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("the WhatsApp program closed the connection: %w", err)
		case f := <-frames:
			switch f.Type {
			case TypeCode:
				if a.cfg.Linking != nil && f.Code != "" {
					a.cfg.Linking.Code(f.Code)
				}
			case TypeLinked:
				if f.Account != nil {
					if a.cfg.Linking != nil {
						a.cfg.Linking.Linked(*f.Account)
					}
					a.account(*f.Account)
				}
			case TypeConnected:
				if f.Account != nil {
					a.account(*f.Account)
				}
				if !connected {
					connected = true
					sink.Connected()
				}
			case TypeMessage:
				if f.Message == nil {
					_ = conn.Write(Frame{Type: TypeDrop, Reason: "a message frame without a message"})
					return errors.New("the WhatsApp program sent a message frame without a message")
				}
				m := f.Message
				err := sink.Inbound(ctx, channels.Inbound{
					Peer: m.Peer, Label: m.Label, Chat: m.Chat, Private: true,
					ExternalID: m.ExternalID, Text: m.Text, HasText: m.HasText,
				})
				if err != nil {
					_ = conn.Write(Frame{Type: TypeDrop, Reason: "the server could not record a message"})
					if ctx.Err() != nil {
						return ctx.Err()
					}
					return fmt.Errorf("a WhatsApp message could not be recorded, so the connection is dropped (WhatsApp does not offer a message again: the person writes again): %w", err)
				}
				if err := conn.Write(Frame{Type: TypeDone, ID: f.ID}); err != nil {
					return fmt.Errorf("the WhatsApp program cannot be reached: %w", err)
				}
			case TypeClosed:
				return a.closed(f)
			default:
				a.cfg.Log.V(1).Info("a frame of the WhatsApp program is not one this server reads; it is ignored", "type", f.Type)
			}
		}
	}
}

func (a *Adapter) account(acc Account) {
	if a.cfg.OnAccount != nil {
		a.cfg.OnAccount(channels.Account{ID: acc.ID, Name: acc.Name})
	}
}

// closed words the program's end of a session as the hub's error.
func (a *Adapter) closed(f Frame) error {
	detail := f.Error.messageOr("")
	var words string
	switch f.Reason {
	case ReasonLoggedOut:
		words = "the device was logged out (removed on the phone, or refused by WhatsApp)"
	case ReasonLinkTimeout:
		words = "no code was scanned in time"
	case ReasonLinkRejected:
		words = "the link was refused"
	case ReasonDisconnected:
		return errors.New("the connection to WhatsApp was lost" + suffix(detail))
	default:
		return errors.New("the WhatsApp program stopped the session" + suffix(detail))
	}
	if a.cfg.Linking != nil {
		a.cfg.Linking.Failed(words)
	}
	return fmt.Errorf("%w (WhatsApp: %s%s)", channels.ErrNeedsRelink, words, suffix(detail))
}

func (e *Error) messageOr(def string) string {
	if e == nil || e.Message == "" {
		return def
	}
	return e.Message
}

func suffix(detail string) string {
	if detail == "" {
		return ""
	}
	return ": " + detail
}

func (a *Adapter) current() (*session, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.sess == nil {
		return nil, errors.New("WhatsApp is not connected yet")
	}
	return a.sess, nil
}

// do makes one call of the program and words its failure as the hub's.
func (a *Adapter) do(ctx context.Context, what string, f Frame) (Frame, error) {
	s, err := a.current()
	if err != nil {
		return Frame{}, err
	}
	r, err := s.call(ctx, f)
	if err != nil {
		return Frame{}, err
	}
	if r.Error == nil {
		return r, nil
	}
	switch r.Error.Kind {
	case ErrorRefused:
		return r, fmt.Errorf("%w (WhatsApp, to %s: %s)", channels.ErrRefused, what, r.Error.messageOr("refused"))
	case ErrorTooOld:
		return r, r.Error
	case ErrorRetryAfter:
		return r, &channels.RetryAfterError{After: max(time.Duration(r.Error.RetryAfterMS)*time.Millisecond, time.Second)}
	}
	return r, fmt.Errorf("WhatsApp, to %s: %s", what, r.Error.messageOr(r.Error.Kind))
}

// SendText sends text to chat, split at MaxText, never with a link
// preview. The program marks the chat read, shows typing and pauses
// before each part (ref 9.8).
func (a *Adapter) SendText(ctx context.Context, chat, text string) error {
	for _, part := range channels.Split(text, MaxText) {
		if _, err := a.do(ctx, "send a message", Frame{Type: TypeSend, Chat: chat, Text: part, NoPreview: true}); err != nil {
			return err
		}
	}
	return nil
}

// SendApproval sends an approval's prompt as plain text (the hub wrote the
// words that answer it); its message id is what an edit needs.
func (a *Adapter) SendApproval(ctx context.Context, chat, text, approvalID string) (string, error) {
	r, err := a.do(ctx, "send an approval", Frame{Type: TypeSend, Chat: chat, Text: cut(text, MaxText), NoPreview: true})
	if err != nil {
		return "", err
	}
	if r.Ref == "" {
		return "", errors.New("the WhatsApp program sent the approval but not its message id")
	}
	return r.Ref, nil
}

// EditApproval rewrites a prompt to its outcome, best effort: WhatsApp
// lets a message be edited for about fifteen minutes, and an edit refused
// for its age counts as done (the prompt keeps its question; a late
// answer is told it was answered already).
func (a *Adapter) EditApproval(ctx context.Context, chat, ref, text string) error {
	_, err := a.do(ctx, "edit an approval", Frame{Type: TypeEdit, Chat: chat, Ref: ref, Text: cut(text, MaxText), NoPreview: true})
	var pe *Error
	if err != nil && errors.As(err, &pe) && pe.Kind == ErrorTooOld {
		return nil
	}
	return err
}

// Typing shows the Dot at work in chat, best effort.
func (a *Adapter) Typing(ctx context.Context, chat string) error {
	_, err := a.do(ctx, "show typing", Frame{Type: TypeTyping, Chat: chat})
	return err
}

// cut bounds a prompt that is not split.
func cut(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
