package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// DecodeProblem says what is wrong with a JSON body.
type DecodeProblem int

const (
	// BodyMalformed is a body that is not one JSON value of the expected shape.
	BodyMalformed DecodeProblem = iota
	// BodyUnknownField is a body naming a field the route does not have.
	BodyUnknownField
	// BodyTrailing is a body holding more after its JSON value.
	BodyTrailing
	// BodyTooLarge is a body over the route's limit.
	BodyTooLarge
	// BodyUnreadable is a body whose transfer failed (a malformed chunk, a
	// connection cut short).
	BodyUnreadable
)

// DecodeError is a body refused by DecodeJSON. Its message never quotes
// the body (it may hold a secret).
type DecodeError struct {
	Problem DecodeProblem
	Limit   int64
	msg     string
}

func (e *DecodeError) Error() string { return e.msg }

// Status is the HTTP status the problem is answered with.
func (e *DecodeError) Status() int {
	if e.Problem == BodyTooLarge {
		return http.StatusRequestEntityTooLarge
	}
	return http.StatusBadRequest
}

// DecodeJSON reads exactly one JSON value of at most limit bytes from r into
// v: a field v does not have (a key naming one of v's fields in another
// case included: encoding/json alone would take it, keys.go), anything but
// white space after the value, a body over limit and a body that cannot be
// read are each refused with a *DecodeError. Every route reading a JSON body from across the guest
// boundary decodes with it and answers the error with its own code, and the
// host reads a guest's answers with it too (a guest is untrusted from the
// host's side): one helper, so both sides refuse the same things.
func DecodeJSON(r io.Reader, limit int64, v any) error {
	body, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return &DecodeError{Problem: BodyTooLarge, Limit: limit, msg: fmt.Sprintf("the body is over the %d-byte limit", limit)}
		}
		return &DecodeError{Problem: BodyUnreadable, msg: "the body could not be read: " + err.Error()}
	}
	if int64(len(body)) > limit {
		return &DecodeError{Problem: BodyTooLarge, Limit: limit, msg: fmt.Sprintf("the body is over the %d-byte limit", limit)}
	}
	return DecodeBytes(body, v)
}

// DecodeBytes is DecodeJSON over a body already read.
func DecodeBytes(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return &DecodeError{Problem: BodyUnknownField, msg: "the body has an unknown field " + f}
		}
		return &DecodeError{Problem: BodyMalformed, msg: "the body is not valid JSON of the expected shape: " + describe(err)}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return &DecodeError{Problem: BodyTrailing, msg: "the body holds more than one JSON value"}
	}
	return checkKeys(body, v)
}

// describe says what json found wrong without quoting the value it read.
func describe(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("syntax error at byte %d", se.Offset)
	case errors.As(err, &te):
		if te.Field != "" {
			return fmt.Sprintf("field %s must be %s, not %s", te.Field, te.Type, te.Value)
		}
		return fmt.Sprintf("must be %s, not %s", te.Type, te.Value)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "the body ends early"
	}
	return "it does not parse"
}
