// Package sse reads server-sent events (text/event-stream): "field: value"
// lines, comment lines starting with ':' (keep-alives), a blank line ending
// each message, LF or CRLF line ends. It is the one reader of both streams
// the host follows: a guest's event stream (hostagent/pump) and the Dots
// API's live stream of the log (internal/dotsapi/client).
package sse

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// Message is one message of a stream.
type Message struct {
	// ID is the value of its id line; HasID says whether it had one.
	ID    string
	HasID bool
	// Event is the value of its event line, "" when none.
	Event string
	// Data is its data lines joined by '\n'; empty when TooLarge.
	Data []byte
	// TooLarge says a line or the data was longer than the Reader's
	// limit: the message was read to its end and its data dropped.
	TooLarge bool
}

// Reader reads the messages of one stream.
type Reader struct {
	br  *bufio.Reader
	max int
}

// NewReader reads r, holding at most max bytes of one message's data.
func NewReader(r io.Reader, max int) *Reader {
	return &Reader{br: bufio.NewReaderSize(r, 64<<10), max: max}
}

// Next returns the next message that has an id, data or is TooLarge (a
// message of comments alone is skipped). At the end of the stream it
// returns io.EOF, dropping a message the end cut short: the stream's id is
// where a reader resumes, and it reads that message again.
func (r *Reader) Next() (Message, error) {
	var m Message
	var data bytes.Buffer
	hasData := false
	for {
		line, tooLong, err := r.line()
		if err != nil {
			return Message{}, err
		}
		if tooLong {
			m.TooLarge = true
			continue
		}
		if len(line) == 0 {
			if m.HasID || hasData || m.TooLarge {
				if !m.TooLarge {
					m.Data = bytes.Clone(data.Bytes())
				}
				return m, nil
			}
			m = Message{}
			continue
		}
		if line[0] == ':' {
			continue // a comment: a keep-alive
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "id":
			m.ID, m.HasID = string(value), true
		case "event":
			m.Event = string(value)
		case "data":
			if hasData {
				data.WriteByte('\n')
			}
			hasData = true
			if data.Len()+len(value) > r.max {
				m.TooLarge = true
				continue
			}
			data.Write(value)
		}
	}
}

// line reads one line without its line end. A line longer than the limit
// (and its field name) is read to its end and dropped; tooLong says so.
func (r *Reader) line() (line []byte, tooLong bool, err error) {
	limit := r.max + 16
	for {
		chunk, err := r.br.ReadSlice('\n')
		if !tooLong && len(line)+len(chunk) <= limit+2 {
			line = append(line, chunk...)
		} else {
			tooLong, line = true, nil
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil {
			return nil, false, err
		}
		line = bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))
		return line, tooLong, nil
	}
}
