// Package porttest holds fakes of the WhatsApp channel's two edges, for
// tests only: FakeProgram plays the program's side of the socket (the real
// program needs WhatsApp's network, which no test reaches), FakeKeyStore
// keeps a device's keys in memory in place of the Channel's Secret.
package porttest

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/invisible-dots/invisible-dots/internal/channels/port"
)

// FakeKeyStore is a KeyStore in memory. Close makes it refuse every write
// as the server's does once the Channel is deleted.
type FakeKeyStore struct {
	mu     sync.Mutex
	keys   port.Keys
	closed bool
	// FailSave, when set, fails every Save with it (nothing is written).
	FailSave error
	saves    int
}

// NewFakeKeyStore holds initial (copied).
func NewFakeKeyStore(initial port.Keys) *FakeKeyStore {
	if initial == nil {
		initial = port.Keys{}
	}
	return &FakeKeyStore{keys: initial.Clone()}
}

func (s *FakeKeyStore) Load(context.Context) (port.Keys, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, port.ErrChannelGone
	}
	return s.keys.Clone(), nil
}

func (s *FakeKeyStore) Save(_ context.Context, changes []port.KeyChange) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return port.ErrChannelGone
	}
	if s.FailSave != nil {
		return s.FailSave
	}
	s.keys.Apply(changes)
	s.saves++
	return nil
}

// Close refuses every later write.
func (s *FakeKeyStore) Close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
}

// Keys is a copy of what is stored.
func (s *FakeKeyStore) Keys() port.Keys {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.keys.Clone()
}

// Saves is how many Saves wrote.
func (s *FakeKeyStore) Saves() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.saves
}

// T is what the fakes need of a test: a *testing.T, or Ginkgo's GinkgoT().
type T interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Cleanup(func())
}

// FakeProgram listens on a unix socket as the program does and hands each
// connection to the test as a FakeSession.
type FakeProgram struct {
	Socket string
	ln     net.Listener
	conns  chan net.Conn
}

// NewFakeProgram listens until the test ends.
func NewFakeProgram(t T) *FakeProgram {
	t.Helper()
	// Short: a unix socket's path has 108 bytes, t.TempDir's can be longer.
	dir, err := os.MkdirTemp("", "wa")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	p := &FakeProgram{Socket: filepath.Join(dir, port.SocketName), conns: make(chan net.Conn, 8)}
	p.ln, err = net.Listen("unix", p.Socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.ln.Close() })
	go func() {
		for {
			c, err := p.ln.Accept()
			if err != nil {
				return
			}
			p.conns <- c
		}
	}()
	return p
}

// Dial is the adapter's Config.Dial.
func (p *FakeProgram) Dial(ctx context.Context) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "unix", p.Socket)
}

// wait bounds every wait of a fake: a test that hangs says where.
const wait = 10 * time.Second

// Accept takes the next connection, reads its hello and answers welcome.
func (p *FakeProgram) Accept(t T) *FakeSession {
	t.Helper()
	return p.AcceptWith(t, port.Frame{Type: port.TypeWelcome, V: port.Version})
}

// AcceptWith is Accept answering welcome with the frame given.
func (p *FakeProgram) AcceptWith(t T, welcome port.Frame) *FakeSession {
	t.Helper()
	var c net.Conn
	select {
	case c = <-p.conns:
	case <-time.After(wait):
		t.Fatal("the adapter did not connect to the fake program")
	}
	s := &FakeSession{conn: port.NewConn(c), frames: make(chan port.Frame, 64), ended: make(chan struct{})}
	t.Cleanup(func() { s.conn.Close() })
	hello, err := s.conn.Read()
	if err != nil {
		t.Fatalf("reading the adapter's hello: %v", err)
	}
	if hello.Type != port.TypeHello {
		t.Fatalf("the adapter's first frame is %q, want hello", hello.Type)
	}
	s.Hello = hello
	s.Send(t, welcome)
	go func() {
		defer close(s.ended)
		for {
			f, err := s.conn.Read()
			if err != nil {
				return
			}
			s.frames <- f
		}
	}()
	return s
}

// FakeSession is one connection of the adapter, as the program sees it.
type FakeSession struct {
	Hello  port.Frame
	conn   *port.Conn
	frames chan port.Frame
	ended  chan struct{}
}

// Send writes f to the adapter.
func (s *FakeSession) Send(t T, f port.Frame) {
	t.Helper()
	if err := s.conn.Write(f); err != nil {
		t.Fatalf("writing a %s frame to the adapter: %v", f.Type, err)
	}
}

// Next is the adapter's next frame.
func (s *FakeSession) Next(t T) port.Frame {
	t.Helper()
	select {
	case f := <-s.frames:
		return f
	case <-s.ended:
		select {
		case f := <-s.frames:
			return f
		default:
		}
		t.Fatal("the adapter closed the connection; a frame was expected")
	case <-time.After(wait):
		t.Fatal("the adapter sent no frame")
	}
	return port.Frame{}
}

// Ended says whether the adapter closed the connection within d, every
// frame before that taken by Next.
func (s *FakeSession) Ended(d time.Duration) bool {
	select {
	case <-s.ended:
		return true
	case <-time.After(d):
		return false
	}
}

// Close closes the program's side.
func (s *FakeSession) Close() { s.conn.Close() }

// ErrFake is an error a test injects.
var ErrFake = errors.New("fake failure")

// Frames are the adapter's frames, for a test that reads them as they come
// (Next fails the test on a wait; this does not).
func (s *FakeSession) Frames() <-chan port.Frame { return s.frames }

// Done is closed once the adapter closed the connection.
func (s *FakeSession) Done() <-chan struct{} { return s.ended }
