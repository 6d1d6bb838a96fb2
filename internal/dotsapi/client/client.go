// Package client is the Go client of the Dots API (internal/dotsapi) for the
// command line, the host agents and tests. It speaks to the API server with a
// rest.Config (a kubeconfig's credentials, or the in-process loopback), so the
// API server's own authentication and RBAC apply. The shapes are those of
// internal/dotsapi/wire.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"k8s.io/client-go/rest"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
)

// Client calls the Dots API of one API server.
type Client struct {
	find *discovery
}

// New returns a client of the Dots API of the cluster cfg names, with cfg's
// credentials: the API server itself serves it (the embedded one), or, when
// the control plane runs against a cluster that is not its own, the server
// the ConfigMap wire.DiscoveryConfigMap names, looked up before the first
// request.
func New(cfg *rest.Config) (*Client, error) {
	if cfg == nil || cfg.Host == "" {
		return nil, errors.New("no API server to reach: the client configuration names none")
	}
	return &Client{find: &discovery{cfg: rest.CopyConfig(cfg)}}, nil
}

// Error is an error answer of the Dots API (ref 9.6), or of the API server's
// filters in front of it (a 401 or 403 before the Dots API is reached, whose
// Code is then empty).
type Error struct {
	Status  int
	Code    string
	Message string
}

func (e *Error) Error() string {
	if e.Code == "" {
		return fmt.Sprintf("the Dots API answered %d: %s", e.Status, e.Message)
	}
	return fmt.Sprintf("the Dots API answered %d %s: %s", e.Status, e.Code, e.Message)
}

// StatusOf is the HTTP status of an error answer, 0 for any other error.
func StatusOf(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.Status
	}
	return 0
}

// CodeOf is the code of an error answer of the Dots API (wire.Code...), ""
// for any other error.
func CodeOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// PostMessage sends text to the Dot namespace/name's chat: it is logged and
// queued for the guest.
func (c *Client) PostMessage(ctx context.Context, namespace, dot, text string) (wire.MessageAccepted, error) {
	var out wire.MessageAccepted
	err := c.do(ctx, http.MethodPost, wire.MessagesPath(namespace, dot), "", wire.PostMessage{Text: text}, http.StatusAccepted, &out)
	return out, err
}

// Messages reads a page of the Dot namespace/name's conversation.
func (c *Client) Messages(ctx context.Context, namespace, dot string, q wire.MessagesQuery) (wire.Messages, error) {
	var out wire.Messages
	err := c.do(ctx, http.MethodGet, wire.MessagesPath(namespace, dot), q.Values().Encode(), nil, http.StatusOK, &out)
	return out, err
}

// IngestEvents hands a batch of the guest events of the Dot
// namespace/name (its UID dotUID) to the control plane, as host's agent. An
// empty batch answers the cursor alone.
func (c *Client) IngestEvents(ctx context.Context, host, namespace, dot, dotUID string, events []protocol.OutboundEvent) (wire.Ingested, error) {
	var out wire.Ingested
	if events == nil {
		events = []protocol.OutboundEvent{}
	}
	err := c.do(ctx, http.MethodPost, wire.EventsPath(host, namespace, dot), "", wire.EventBatch{DotUID: dotUID, Events: events}, http.StatusOK, &out)
	return out, err
}

// Outbox reads the Dot namespace/name's pending outbox rows, in order, as
// host's agent.
func (c *Client) Outbox(ctx context.Context, host, namespace, dot string) (wire.Outbox, error) {
	var out wire.Outbox
	err := c.do(ctx, http.MethodGet, wire.OutboxPath(host, namespace, dot), "", nil, http.StatusOK, &out)
	return out, err
}

// Events reads a page of the Dot namespace/name's event log.
func (c *Client) Events(ctx context.Context, namespace, dot string, q wire.EventsQuery) (wire.Events, error) {
	var out wire.Events
	err := c.do(ctx, http.MethodGet, wire.DotEventsPath(namespace, dot), q.Values().Encode(), nil, http.StatusOK, &out)
	return out, err
}

// WaitOutbox waits up to wait for outbox rows of host's Dots enqueued since
// the cursor after (the Cursor of the last answer; "" at first), as host's
// agent.
func (c *Client) WaitOutbox(ctx context.Context, host, after string, wait time.Duration) (wire.OutboxChanges, error) {
	var out wire.OutboxChanges
	q := url.Values{"wait": {wait.String()}}
	if after != "" {
		q.Set("after", after)
	}
	err := c.do(ctx, http.MethodGet, wire.HostOutboxPath(host), q.Encode(), nil, http.StatusOK, &out)
	return out, err
}

// Ack records what became of a send of the outbox row id of the Dot
// namespace/name, as host's agent.
func (c *Client) Ack(ctx context.Context, host, namespace, dot, id string, ack wire.Ack) (wire.Acked, error) {
	var out wire.Acked
	err := c.do(ctx, http.MethodPost, wire.AckPath(host, namespace, dot, id), "", ack, http.StatusOK, &out)
	return out, err
}

// do sends one request and decodes the answer of status want into out.
func (c *Client) do(ctx context.Context, method, path, query string, in any, want int, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("encode the body of %s %s: %w", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	resp, e, err := c.send(ctx, method, path, query, body, func(req *http.Request) {
		req.Header.Set("Accept", "application/json")
		if in != nil {
			req.Header.Set("Content-Type", "application/json")
		}
	})
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	// Answers are small; an error page of a proxy in the way is cut short.
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("%s %s: read the answer: %w", method, path, err)
	}
	if resp.StatusCode != want {
		return c.failed(e, resp.StatusCode, data)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%s %s: the answer does not read: %w", method, path, err)
	}
	return nil
}

// errorOf reads an error answer: the Dots API's own shape, or a Kubernetes
// Status from the filters in front of it.
func errorOf(status int, data []byte) error {
	var e wire.Error
	if json.Unmarshal(data, &e) == nil && e.Code != "" {
		return &Error{Status: status, Code: e.Code, Message: e.Message}
	}
	var s struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(data, &s) == nil && s.Message != "" {
		return &Error{Status: status, Message: s.Message}
	}
	msg := strings.TrimSpace(string(data))
	if len(msg) > 200 {
		msg = msg[:200] + "..."
	}
	return &Error{Status: status, Message: msg}
}

// AnswerApproval answers the Approval namespace/name with decision
// (wire.DecisionApprove or wire.DecisionReject). An Approval answered
// already is an *Error with Status 409 and Code wire.CodeAlreadyResolved.
func (c *Client) AnswerApproval(ctx context.Context, namespace, name, decision string, answer wire.ApprovalAnswer) (wire.ApprovalAnswered, error) {
	var out wire.ApprovalAnswered
	err := c.do(ctx, http.MethodPost, wire.ApprovalAnswerPath(namespace, name, decision), "", answer, http.StatusOK, &out)
	return out, err
}

// PowerComputer starts, stops or reboots the computer of the Dot
// namespace/dot: action is wire.PowerStart, wire.PowerStop or
// wire.PowerReboot. The server applies the Computer's power rule; a reboot
// while a person's stop holds is an *Error with Status 409 and Code
// wire.CodeComputerHalted (start it instead).
func (c *Client) PowerComputer(ctx context.Context, namespace, dot, action string) (wire.ComputerPowered, error) {
	var out wire.ComputerPowered
	err := c.do(ctx, http.MethodPost, wire.ComputerPowerPath(namespace, dot, action), "", nil, http.StatusOK, &out)
	return out, err
}
