package tools

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

// agentdFiles is the client of the file routes of dot-agentd's local socket
// (ref 5.2): they act as dot, so what the model may touch is the operating
// system's decision, not the engine's (ref 8.8).
type agentdFiles struct {
	hc *http.Client
}

func newAgentdFiles(socket string) *agentdFiles {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
		MaxIdleConns:    4,
		IdleConnTimeout: 30 * time.Second,
	}
	return &agentdFiles{hc: &http.Client{Transport: tr}}
}

// fileError is an answer of a file route that is not a success.
type fileError struct {
	Status int
	Code   string
	Msg    string
	Path   string
}

func (e *fileError) Error() string {
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
	msg := e.Msg
	if msg == "" {
		msg = e.Code
	}
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	return fmt.Sprintf("dot-agentd refused %s: %s", e.Path, msg)
}

func isCode(err error, code string) bool {
	var fe *fileError
	return errors.As(err, &fe) && fe.Code == code
}

func (a *agentdFiles) do(ctx context.Context, method, route, p string, body []byte) (*http.Response, error) {
	u := "http://agentd" + route + "?" + url.Values{protocol.QueryPath: {p}}.Encode()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/octet-stream")
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("dot-agentd does not answer on its socket (%v)", err)
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 16*1024))
		var er protocol.ErrorResponse
		_ = json.Unmarshal(raw, &er)
		if er.Error == "" && resp.StatusCode == http.StatusNotFound {
			er.Error = protocol.ErrNotFound
		}
		return nil, &fileError{Status: resp.StatusCode, Code: er.Error, Msg: er.Message, Path: p}
	}
	return resp, nil
}

// get reads a whole file.
func (a *agentdFiles) get(ctx context.Context, p string) ([]byte, error) {
	resp, err := a.do(ctx, http.MethodGet, protocol.PathFiles, p, nil)
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

// put writes a whole file.
func (a *agentdFiles) put(ctx context.Context, p string, data []byte) error {
	resp, err := a.do(ctx, http.MethodPut, protocol.PathFiles, p, data)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// list lists a directory.
func (a *agentdFiles) list(ctx context.Context, p string) ([]protocol.ListEntry, error) {
	resp, err := a.do(ctx, http.MethodGet, protocol.PathFilesList, p, nil)
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
