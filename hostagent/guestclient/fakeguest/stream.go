package fakeguest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// Stream is a guest's outbox as the engine's GET /events/stream serves it
// (ref 5.3): on each connection a keep-alive comment, then every message
// after the cursor asked for, in seq order, as "id: SEQ\ndata: JSON\n\n",
// then each new one as it is appended, until the reader goes or a cut ends
// the connection (a dropped stream). Safe for concurrent use.
type Stream struct {
	mu   sync.Mutex
	msgs []message
	// grew is closed and replaced on every append.
	grew chan struct{}
	// cuts: the next connections end after these many messages each.
	cuts []int
	// opened is the cursor each connection asked for.
	opened []int64
	// open are the connections being served.
	open map[*io.PipeWriter]bool
}

type message struct {
	seq  int64
	data string
}

// NewStream returns an empty stream.
func NewStream() *Stream { return &Stream{grew: make(chan struct{})} }

// Append writes events to the outbox. An event's seq, id and ts, when not
// set, are the next seq, "ev-SEQ" and now. It returns the events as written.
func (s *Stream) Append(evs ...protocol.OutboundEvent) []protocol.OutboundEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]protocol.OutboundEvent, 0, len(evs))
	for _, ev := range evs {
		if ev.Seq == 0 {
			ev.Seq = s.lastSeq() + 1
		}
		if ev.ID == "" {
			ev.ID = "ev-" + strconv.FormatInt(ev.Seq, 10)
		}
		if ev.TS == "" {
			ev.TS = time.Now().UTC().Format(time.RFC3339Nano)
		}
		if ev.Data == nil {
			ev.Data = json.RawMessage(`{}`)
		}
		b, err := json.Marshal(ev)
		if err != nil {
			panic(fmt.Sprintf("fake stream: encode event %d: %v", ev.Seq, err))
		}
		s.msgs = append(s.msgs, message{seq: ev.Seq, data: string(b)})
		out = append(out, ev)
	}
	s.grow()
	return out
}

// AppendRaw writes a message whose data is not an event the engine would
// write (not JSON, too large), under seq.
func (s *Stream) AppendRaw(seq int64, data string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.msgs = append(s.msgs, message{seq: seq, data: data})
	s.grow()
}

func (s *Stream) lastSeq() int64 {
	if len(s.msgs) == 0 {
		return 0
	}
	return s.msgs[len(s.msgs)-1].seq
}

func (s *Stream) grow() {
	if s.grew == nil {
		s.grew = make(chan struct{})
	}
	close(s.grew)
	s.grew = make(chan struct{})
}

// CutNext makes the next connections end after n messages each, one n a
// connection, as a connection that drops.
func (s *Stream) CutNext(n ...int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cuts = append(s.cuts, n...)
}

// Drop ends every connection being served now, as a reset would.
func (s *Stream) Drop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for w := range s.open {
		w.CloseWithError(io.ErrUnexpectedEOF)
	}
}

// Opened is the cursor (?after=) of each connection so far.
func (s *Stream) Opened() []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int64(nil), s.opened...)
}

// Open serves one connection: the body of a 200 answer of the stream.
func (s *Stream) Open(ctx context.Context, after int64) io.ReadCloser {
	s.mu.Lock()
	s.opened = append(s.opened, after)
	cut := -1
	if len(s.cuts) > 0 {
		cut, s.cuts = s.cuts[0], s.cuts[1:]
	}
	if s.grew == nil {
		s.grew = make(chan struct{})
	}
	r, w := io.Pipe()
	if s.open == nil {
		s.open = map[*io.PipeWriter]bool{}
	}
	s.open[w] = true
	s.mu.Unlock()
	go func() {
		defer func() {
			s.mu.Lock()
			delete(s.open, w)
			s.mu.Unlock()
		}()
		// Writes fail once the reader closed the body; the connection
		// then ends as a real one would.
		_, err := io.WriteString(w, ": keep-alive\n\n")
		sent := 0
		for err == nil {
			s.mu.Lock()
			var next []message
			for _, m := range s.msgs {
				if m.seq > after {
					next = append(next, m)
				}
			}
			grew := s.grew
			s.mu.Unlock()
			for _, m := range next {
				if cut >= 0 && sent == cut {
					w.Close()
					return
				}
				if _, err = fmt.Fprintf(w, "id: %d\ndata: %s\n\n", m.seq, m.data); err != nil {
					return
				}
				sent++
				after = m.seq
			}
			select {
			case <-ctx.Done():
				w.CloseWithError(ctx.Err())
				return
			case <-grew:
			}
		}
	}()
	return r
}
