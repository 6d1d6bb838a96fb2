package port

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
)

// ErrEnded: the connection ended before the other side answered.
var ErrEnded = errors.New("the connection ended before the other side answered")

// Calls pairs the frames one side of a Conn sends with the answers the
// other side gives (keys with ack, message with done, send with result):
// each call numbers its frame, Answer hands an answer to the call of its ID,
// and End fails every call still waiting. Both sides of the socket use it.
type Calls struct {
	conn    *Conn
	next    atomic.Uint64
	mu      sync.Mutex
	waiting map[uint64]chan Frame
	ended   chan struct{}
	endOnce sync.Once
}

// NewCalls pairs calls over conn.
func NewCalls(conn *Conn) *Calls {
	return &Calls{conn: conn, waiting: map[uint64]chan Frame{}, ended: make(chan struct{})}
}

// Call sends f under a fresh ID and waits for its answer, the end, or ctx.
// A write that fails ends the calls.
func (c *Calls) Call(ctx context.Context, f Frame) (Frame, error) {
	f.ID = c.next.Add(1)
	answer := make(chan Frame, 1)
	c.mu.Lock()
	c.waiting[f.ID] = answer
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.waiting, f.ID)
		c.mu.Unlock()
	}()
	if err := c.conn.Write(f); err != nil {
		c.End()
		return Frame{}, ErrEnded
	}
	select {
	case r := <-answer:
		return r, nil
	case <-c.ended:
		return Frame{}, ErrEnded
	case <-ctx.Done():
		return Frame{}, ctx.Err()
	}
}

// Answer hands f to the call waiting for its ID; an answer nobody waits
// for (its call gave up) is dropped.
func (c *Calls) Answer(f Frame) {
	c.mu.Lock()
	ch := c.waiting[f.ID]
	c.mu.Unlock()
	if ch != nil {
		ch <- f
	}
}

// End fails every call waiting and every call to come.
func (c *Calls) End() { c.endOnce.Do(func() { close(c.ended) }) }

// Ended is closed once End was called.
func (c *Calls) Ended() <-chan struct{} { return c.ended }
