package memory

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// AgentdFiles reaches the Dot's files through dot-agentd's local socket, as
// dot (ref 5.2): the notes, the skills and the conversation files are the
// Dot's, so the engine writes them as the Dot would.
type AgentdFiles struct {
	hc *http.Client
}

// NewAgentdFiles returns a client of the file routes on socket.
func NewAgentdFiles(socket string) *AgentdFiles {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
		MaxIdleConns:    2,
		IdleConnTimeout: 30 * time.Second,
	}
	return &AgentdFiles{hc: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
}

func (a *AgentdFiles) do(ctx context.Context, method, route, p string, body []byte) ([]byte, error) {
	u := "http://agentd" + route + "?" + url.Values{protocol.QueryPath: {p}}.Encode()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, fmt.Errorf("build %s %s: %w", method, route, err)
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("dot-agentd does not answer on its socket: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("read %s of %s: %w", route, p, err)
	}
	if resp.StatusCode/100 != 2 {
		var er protocol.ErrorResponse
		_ = json.Unmarshal(data, &er)
		return nil, fmt.Errorf("dot-agentd answered %d (%s) for %s", resp.StatusCode, er.Error, p)
	}
	return data, nil
}

// Read reads a whole file.
func (a *AgentdFiles) Read(ctx context.Context, p string) ([]byte, error) {
	return a.do(ctx, http.MethodGet, protocol.PathFiles, p, nil)
}

// Write writes a whole file; dot-agentd makes missing parent directories.
func (a *AgentdFiles) Write(ctx context.Context, p string, data []byte) error {
	if data == nil {
		data = []byte{}
	}
	_, err := a.do(ctx, http.MethodPut, protocol.PathFiles, p, data)
	return err
}

// List lists a directory.
func (a *AgentdFiles) List(ctx context.Context, p string) ([]protocol.ListEntry, error) {
	data, err := a.do(ctx, http.MethodGet, protocol.PathFilesList, p, nil)
	if err != nil {
		return nil, err
	}
	var lr protocol.ListResponse
	if err := json.Unmarshal(data, &lr); err != nil {
		return nil, fmt.Errorf("decode the listing of %s: %w", p, err)
	}
	return lr.Entries, nil
}
