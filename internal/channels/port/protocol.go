package port

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
)

// Version is the protocol's version. The server says it in its hello and
// the program answers with its own in welcome; a program that speaks
// another version is refused (ErrVersion) rather than half understood.
const Version = 1

// MaxFrame bounds one line of the protocol: a hello carries every key of
// a linked device (a few hundred kilobytes for a busy account).
const MaxFrame = 16 << 20

// Frame types the server sends.
const (
	// TypeHello opens a session: the protocol's version and the device's
	// keys (none: the program links a new device by a code).
	TypeHello = "hello"
	// TypeAck says the keys of a keys frame are saved; TypeNack that they
	// are not (Error says why), so the program's write fails.
	TypeAck  = "ack"
	TypeNack = "nack"
	// TypeDone says the message of a message frame is dealt with.
	TypeDone = "done"
	// TypeSend, TypeEdit and TypeTyping ask for a send, an edit of a sent
	// message and a typing indicator; each is answered by a result frame of
	// the same ID.
	TypeSend   = "send"
	TypeEdit   = "edit"
	TypeTyping = "typing"
	// TypeDrop ends the session: the program disconnects from WhatsApp
	// and closes the connection (Reason says why, for its log).
	TypeDrop = "drop"
)

// Frame types the program sends.
const (
	// TypeWelcome answers hello with the program's version.
	TypeWelcome = "welcome"
	// TypeCode is a code to show as a QR while a new device links.
	TypeCode = "code"
	// TypeLinked says the phone linked the device (Account).
	TypeLinked = "linked"
	// TypeConnected says the device is connected and receives (Account).
	TypeConnected = "connected"
	// TypeKeys is a change of the device's state that the program's write
	// waits on: it returns only once the server answered ack (or nack).
	TypeKeys = "keys"
	// TypeMessage is a message from a one-to-one chat; the program sends
	// the next one only after the done frame of this one.
	TypeMessage = "message"
	// TypeResult answers send, edit and typing (Ref, or Error).
	TypeResult = "result"
	// TypeClosed ends the session from the program's side (Reason).
	TypeClosed = "closed"
)

// Reasons of a closed frame.
const (
	// ReasonLoggedOut: the device was removed on the phone, or WhatsApp
	// refuses it; its keys are worth nothing now (a relink).
	ReasonLoggedOut = "logged_out"
	// ReasonLinkTimeout: no code was scanned in time (a relink).
	ReasonLinkTimeout = "link_timeout"
	// ReasonLinkRejected: the phone or WhatsApp refused the link (a relink).
	ReasonLinkRejected = "link_rejected"
	// ReasonDisconnected: the connection to WhatsApp was lost (a retry).
	ReasonDisconnected = "disconnected"
	// ReasonFailed: anything else the program could not go on from (a retry).
	ReasonFailed = "failed"
)

// Kinds of a result's error.
const (
	// ErrorRefused: WhatsApp refused for good; the message is dropped.
	ErrorRefused = "refused"
	// ErrorRetryAfter: try again after RetryAfterMS.
	ErrorRetryAfter = "retry_after"
	// ErrorTooOld: an edit of a message WhatsApp no longer lets be edited.
	ErrorTooOld = "too_old"
	// ErrorNotConnected: the device is not connected (yet).
	ErrorNotConnected = "not_connected"
	// ErrorFailed: any other failure, worth a retry.
	ErrorFailed = "failed"
)

// Frame is one line of the protocol, in either direction; Type says which
// fields it carries.
type Frame struct {
	Type string `json:"type"`
	// ID pairs a request with its answer (keys with ack, message with
	// done, send with result); each side counts its own from 1.
	ID uint64 `json:"id,omitempty"`
	// V is the sender's protocol version (hello, welcome).
	V int `json:"v,omitempty"`
	// Keys is the device's state at hello, by group and key.
	Keys Keys `json:"keys,omitempty"`
	// Changes are a keys frame's writes, in order.
	Changes []KeyChange `json:"changes,omitempty"`
	// Code is a link code (code frame only; a secret while it is shown).
	Code string `json:"code,omitempty"`
	// Account is the linked account (linked, connected).
	Account *Account `json:"account,omitempty"`
	// Message is a message frame's message.
	Message *Message `json:"message,omitempty"`
	// Chat, Text and Ref are what send, edit and typing act on; Ref is
	// also the sent message's id in a send's result.
	Chat string `json:"chat,omitempty"`
	Text string `json:"text,omitempty"`
	Ref  string `json:"ref,omitempty"`
	// NoPreview is set on every send and edit: the protocol has no way to
	// ask for a link preview (ref 9.8: nothing a Dot names is fetched on
	// its behalf), and the program refuses a send or edit without it.
	NoPreview bool `json:"no_preview,omitempty"`
	// Reason is why a session ends (closed, drop).
	Reason string `json:"reason,omitempty"`
	// Error is a result's or nack's failure.
	Error *Error `json:"error,omitempty"`
}

// Keys is a device's state: groups of keys, each value opaque bytes the
// program alone reads.
type Keys map[string]map[string][]byte

// KeyChange is one write: Value nil deletes the key; Key "" with Value nil
// deletes the whole group.
type KeyChange struct {
	Group string `json:"group"`
	Key   string `json:"key,omitempty"`
	Value []byte `json:"value,omitempty"`
}

// Apply applies changes to k in order.
func (k Keys) Apply(changes []KeyChange) {
	for _, c := range changes {
		switch {
		case c.Key == "" && c.Value == nil:
			delete(k, c.Group)
		case c.Value == nil:
			delete(k[c.Group], c.Key)
			if len(k[c.Group]) == 0 {
				delete(k, c.Group)
			}
		default:
			if k[c.Group] == nil {
				k[c.Group] = map[string][]byte{}
			}
			k[c.Group][c.Key] = c.Value
		}
	}
}

// Clone is a deep copy of k.
func (k Keys) Clone() Keys {
	out := make(Keys, len(k))
	for g, m := range k {
		c := make(map[string][]byte, len(m))
		for key, v := range m {
			c[key] = append([]byte(nil), v...)
		}
		out[g] = c
	}
	return out
}

// Account is the WhatsApp account the device belongs to.
type Account struct {
	// ID is the account's stable id: its phone number, digits only.
	ID string `json:"id"`
	// Name is how the account is shown: "+" and the number.
	Name string `json:"name,omitempty"`
}

// Message is a message as the program read it (channels.Inbound's
// fields): only one-to-one chats reach the server.
type Message struct {
	// Peer is the sender: the phone number's digits when known, else
	// "lid:" and the LID's user part; device suffixes dropped.
	Peer string `json:"peer"`
	// Label is the sender's push name.
	Label string `json:"label,omitempty"`
	// Chat is the address to answer (a JID without device).
	Chat string `json:"chat"`
	// ExternalID is WhatsApp's message id, prefixed by the account's
	// number (ids are per account).
	ExternalID string `json:"external_id"`
	Text       string `json:"text,omitempty"`
	HasText    bool   `json:"has_text,omitempty"`
}

// Error is a failure told across the socket, in words that name no secret.
type Error struct {
	Kind         string `json:"kind"`
	Message      string `json:"message,omitempty"`
	RetryAfterMS int64  `json:"retry_after_ms,omitempty"`
}

func (e *Error) Error() string {
	if e.Message == "" {
		return "the WhatsApp program failed (" + e.Kind + ")"
	}
	return e.Message
}

// ErrVersion: the two sides speak different versions of the protocol.
var ErrVersion = errors.New("the WhatsApp program speaks another version of the channel protocol: build it again from this release (make whatsapp)")

// Conn is one end of the protocol over a stream: frames written whole
// (one writer at a time), read one line at a time.
type Conn struct {
	rw io.ReadWriteCloser
	r  *bufio.Reader
	mu sync.Mutex
}

// NewConn speaks the protocol over rw.
func NewConn(rw io.ReadWriteCloser) *Conn {
	return &Conn{rw: rw, r: bufio.NewReaderSize(rw, 64<<10)}
}

// Write sends one frame.
func (c *Conn) Write(f Frame) error {
	b, err := json.Marshal(f)
	if err != nil {
		return fmt.Errorf("encoding a %s frame: %w", f.Type, err)
	}
	b = append(b, '\n')
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err = c.rw.Write(b)
	return err
}

// Read reads the next frame; one reader at a time.
func (c *Conn) Read() (Frame, error) {
	var line []byte
	for {
		part, err := c.r.ReadSlice('\n')
		line = append(line, part...)
		if len(line) > MaxFrame {
			return Frame{}, fmt.Errorf("a frame of the channel protocol is longer than %d bytes", MaxFrame)
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			if err == io.EOF && len(line) > 0 {
				return Frame{}, io.ErrUnexpectedEOF
			}
			return Frame{}, err
		}
		break
	}
	var f Frame
	if err := json.Unmarshal(line, &f); err != nil {
		// The line may hold keys: the error says where, never what.
		return Frame{}, errors.New("a frame of the channel protocol is not valid JSON")
	}
	if f.Type == "" {
		return Frame{}, errors.New("a frame of the channel protocol has no type")
	}
	return f, nil
}

// Close closes the stream.
func (c *Conn) Close() error { return c.rw.Close() }
