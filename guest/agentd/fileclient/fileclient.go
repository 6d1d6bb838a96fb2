// Package fileclient is the engine's client of the file routes of
// dot-agentd's local socket (ref 5.2): GET and PUT /v1/files and GET
// /v1/files/list, and GET /v1/screenshot (the desktop as a PNG, for
// computer_screenshot). They act as dot, so what the engine may read and write (the
// model's file tools, the Dot's notes, skills and conversation files) is the
// operating system's decision, not the engine's (ref 8.8).
package fileclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// errorBodyMax bounds how much of a refusal's body is read: it is a small
// JSON ErrorResponse, anything longer is not one.
const errorBodyMax = 16 << 10

// Client reaches the file routes of one dot-agentd socket.
type Client struct {
	hc *http.Client
}

// New returns a client of the file routes on socket. A timeout above zero
// bounds each request whole, for callers that must not wait on a stuck
// dot-agentd; zero leaves the bound to ctx.
func New(socket string, timeout time.Duration) *Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
		MaxIdleConns:    4,
		IdleConnTimeout: 30 * time.Second,
	}
	return &Client{hc: &http.Client{Transport: tr, Timeout: timeout}}
}

// Error is an answer of a file route that is not a success. Code is the
// protocol's error code (protocol.ErrNotFound, ...), so callers can tell a
// missing file from a refusal with HasCode.
type Error struct {
	Status  int
	Code    string
	Message string
	Path    string
}

func (e *Error) Error() string {
	switch e.Code {
	case protocol.ErrNotFound:
		return fmt.Sprintf("%s does not exist", e.Path)
	case protocol.ErrPermissionDenied:
		return fmt.Sprintf("the dot user may not open %s", e.Path)
	case protocol.ErrIsDirectory:
		return fmt.Sprintf("%s is a directory", e.Path)
	case protocol.ErrNotDirectory:
		return fmt.Sprintf("%s is not a directory", e.Path)
	case protocol.ErrTooLarge:
		return fmt.Sprintf("%s is too large for the file route (at most %d bytes)", e.Path, protocol.FilesMaxPutBytes)
	}
	msg := e.Message
	if msg == "" {
		msg = e.Code
	}
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	if e.Path == "" {
		return "dot-agentd refused: " + msg
	}
	return fmt.Sprintf("dot-agentd refused %s: %s", e.Path, msg)
}

// HasCode reports whether err is, or wraps, an answer of dot-agentd with the
// error code code.
func HasCode(err error, code string) bool {
	var fe *Error
	return errors.As(err, &fe) && fe.Code == code
}

// do sends one request about path p. A success is returned with its body
// open; anything else is an *Error, the context's error, or the socket's.
func (c *Client) do(ctx context.Context, method, route, p string, body []byte) (*http.Response, error) {
	u := "http://agentd" + route
	if p != "" {
		u += "?" + url.Values{protocol.QueryPath: {p}}.Encode()
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, fmt.Errorf("build %s %s for %s: %w", method, route, p, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/octet-stream")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("dot-agentd does not answer on its socket: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, errorBodyMax))
		var er protocol.ErrorResponse
		_ = json.Unmarshal(raw, &er)
		if er.Error == "" && resp.StatusCode == http.StatusNotFound {
			er.Error = protocol.ErrNotFound
		}
		return nil, &Error{Status: resp.StatusCode, Code: er.Error, Message: er.Message, Path: p}
	}
	return resp, nil
}

// Read reads a whole file.
func (c *Client) Read(ctx context.Context, p string) ([]byte, error) {
	resp, err := c.do(ctx, http.MethodGet, protocol.PathFiles, p, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("read %s from dot-agentd: %w", p, err)
	}
	return b, nil
}

// Write writes a whole file; dot-agentd makes missing parent directories.
func (c *Client) Write(ctx context.Context, p string, data []byte) error {
	resp, err := c.do(ctx, http.MethodPut, protocol.PathFiles, p, data)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// List lists a directory.
func (c *Client) List(ctx context.Context, p string) ([]protocol.ListEntry, error) {
	resp, err := c.do(ctx, http.MethodGet, protocol.PathFilesList, p, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var lr protocol.ListResponse
	if err := json.NewDecoder(resp.Body).Decode(&lr); err != nil {
		return nil, fmt.Errorf("read the listing of %s from dot-agentd: %w", p, err)
	}
	return lr.Entries, nil
}

// Screenshot takes the desktop (the display dot-agentd serves) as a PNG.
// A refusal is an *Error with the route's code (no_display,
// screenshot_failed) and its Path empty.
func (c *Client) Screenshot(ctx context.Context) ([]byte, error) {
	resp, err := c.do(ctx, http.MethodGet, protocol.PathScreenshot, "", nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("read the screenshot from dot-agentd: %w", err)
	}
	return b, nil
}
