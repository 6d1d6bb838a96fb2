// Package wire holds the shapes of the Dots API (DESIGN.md 2): its paths, the
// request and answer bodies, the error codes and the limits. The server
// (internal/dotsapi) and its Go client (internal/dotsapi/client) both use
// them, so there is one copy of each; the guest's own wire types stay in
// guest/protocol and travel here unchanged.
package wire

import (
	"encoding/json"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// Prefix is where the Dots API is served, on the API server's own port.
const Prefix = "/dots/v1/"

// Discovery: where the Dots API is served when the control plane runs
// against a cluster that is not its own (server --kubeconfig), whose API
// server does not serve Prefix. The server writes the ConfigMap
// DiscoveryConfigMap in the system namespace (its HTTPS address and the CA of
// its certificate: nothing secret) and every authenticated user may read it
// (config/rbac/dots_api_discovery.yaml). On the embedded API server it does
// not exist: the API server itself serves the Dots API.
const (
	DiscoveryConfigMap = "dots-api"
	// DiscoveryServerKey is https://host:port.
	DiscoveryServerKey = "server"
	// DiscoveryCAKey is the PEM of the CA that signed its certificate.
	DiscoveryCAKey = "ca.crt"
)

// HostAgentPrefix is the part of the API for host agents only: their
// ClusterRole alone gets it as nonResourceURLs.
const HostAgentPrefix = Prefix + "hostagent/"

// Event types the control plane logs itself (source host), beside the guest's
// outbound types of guest/protocol.
const (
	// EventMessageUser is a person's chat message: MessageUser.
	EventMessageUser = "message.user"
	// EventGuestRefused stands in the log for a guest event the protocol
	// refuses: GuestEventRefused.
	EventGuestRefused = "guest.event.refused"
	// EventTaskCreated: the dispatcher gave a task to its Dot (a run opens;
	// {task_id, task, run}). It shares its name with the guest's inbound
	// event it goes with; the source tells them apart.
	EventTaskCreated = "task.created"
	// EventTaskCancelled: a person's cancel ended the task ({task_id, task}).
	EventTaskCancelled = "task.cancelled"
	// EventTaskFailed: the control plane gave the task up ({task_id,
	// error}), as the deliverer does after its failures.
	EventTaskFailed = "task.failed"
	// EventApprovalRequested: the control plane asks a person itself, in
	// the log of the Dot the question concerns: a namespace's request for
	// more spend in a day (protocol.SpendPermission). Its data is the
	// guest's ApprovalRequested, with no task; the source tells them apart.
	EventApprovalRequested = "approval.requested"
	// EventApprovalResolved: a person decided ({approval_id, approval,
	// decision, always}).
	EventApprovalResolved = "approval.resolved"
	// EventDotCreated and EventDotUpdated: the Dot's spec as of a
	// generation ({generation}; dot.updated also {permission} when an
	// "always allow" changed it, and {name, mcp_server_added, approval_id?,
	// mcp_event} when the control plane wrote a server the Dot added
	// itself, mcp_event being the guest's mcp.server.added it answers).
	EventDotCreated = "dot.created"
	EventDotUpdated = "dot.updated"
	// EventComputerState: the Dot's Computer changed state ({state,
	// stop_reason}).
	EventComputerState = "computer.state"
	// EventMCPServerRefused: the control plane did not write a server the
	// Dot asked to add ({name, reason, mcp_event}, ref 5.4).
	EventMCPServerRefused = "mcp.server.refused"
	// EventChannelPeerPaired: a person paired with the Dot through a
	// messaging channel (ChannelPeerPaired, ref 9.8).
	EventChannelPeerPaired = "channel.peer.paired"
	// EventChannelStatus: a messaging channel's link changed state
	// (ChannelStatus, ref 9.8), once per change.
	EventChannelStatus = "channel.status"
)

// HostEventTypes lists the types the control plane logs itself.
var HostEventTypes = []string{
	EventMessageUser, EventGuestRefused, EventTaskCreated, EventTaskCancelled, EventTaskFailed,
	EventApprovalRequested, EventApprovalResolved, EventDotCreated, EventDotUpdated, EventComputerState, EventMCPServerRefused,
	EventChannelPeerPaired, EventChannelStatus,
}

// ChannelPeerPaired is the data of EventChannelPeerPaired: the channel's
// kind, the person's stable id there and how they call themselves.
type ChannelPeerPaired struct {
	Kind   string `json:"kind"`
	PeerID string `json:"peer_id"`
	Label  string `json:"label"`
}

// ChannelStatus is the data of EventChannelStatus: the channel's kind, its
// Channel's name, the state (connecting, connected, needs_relink, error,
// paused) and why (cut to 300 characters, never holding a credential).
type ChannelStatus struct {
	Kind    string `json:"kind"`
	Channel string `json:"channel"`
	State   string `json:"state"`
	Detail  string `json:"detail,omitempty"`
}

// ChannelKindNames is how each messaging channel's kind is named to people
// (the web client's generated tables hold it too).
var ChannelKindNames = map[string]string{"telegram": "Telegram", "whatsapp": "WhatsApp"}

// ChannelKindName is how a channel's kind is named to people.
func ChannelKindName(kind string) string {
	if name, ok := ChannelKindNames[kind]; ok {
		return name
	}
	return kind
}

// IsEventType says whether the log can hold events of type t: the host's
// own, or a guest's outbound type.
func IsEventType(t string) bool {
	return slices.Contains(HostEventTypes, t) || slices.Contains(protocol.OutboundTypes, t)
}

// MessageUser is the data of EventMessageUser.
type MessageUser struct {
	Text string `json:"text"`
	// Origin is where a messaging channel's message came from (ref 5.4,
	// 9.8); absent for the web client, the command line and programs.
	Origin *MessageOrigin `json:"origin,omitempty"`
}

// MessageOrigin is a messaging channel's message's origin (ref 5.4): the
// log is the one place that says where a message came from, and the answer
// is routed back by it. The channel's own message id is stored once per Dot
// and binding (the events_channel_origin index), so a redelivery finds the
// first.
type MessageOrigin struct {
	// Channel is the kind: telegram, whatsapp.
	Channel string `json:"channel"`
	// BindingID is the Dot's link to the channel the message came through.
	BindingID string `json:"binding_id"`
	// ChatID is the chat the answer goes back to.
	ChatID string `json:"chat_id"`
	// ExternalID is the channel's own id of the message.
	ExternalID string `json:"external_id"`
}

// GuestEventRefused is the data of EventGuestRefused: the event as the guest
// sent it and why the protocol refused it.
type GuestEventRefused struct {
	ID     string          `json:"id"`
	Type   string          `json:"type"`
	TS     string          `json:"ts"`
	Data   json.RawMessage `json:"data,omitempty"`
	Reason string          `json:"reason"`
}

// Error is every error answer: a 4xx or 5xx status with a code of the list
// below and a text for people (ref 9.6). Neither ever holds a secret. It is
// also a Kubernetes Status (kind, apiVersion, status, reason, code), so
// kubectl get --raw and client-go show its message instead of "the server
// rejected our request for an unknown reason"; this product's clients read
// error and message.
type Error struct {
	Kind       string `json:"kind"`
	APIVersion string `json:"apiVersion"`
	Status     string `json:"status"`
	Reason     string `json:"reason,omitempty"`
	HTTPCode   int    `json:"code"`
	Code       string `json:"error"`
	Message    string `json:"message"`
}

// NewError is the answer of an HTTP status with its code and message.
func NewError(httpStatus int, code, message string) Error {
	return Error{
		Kind: "Status", APIVersion: "v1", Status: "Failure",
		Reason: statusReasons[httpStatus], HTTPCode: httpStatus,
		Code: code, Message: message,
	}
}

// statusReasons are Kubernetes' StatusReason words for the HTTP statuses
// the Dots API answers with.
var statusReasons = map[int]string{
	400: "BadRequest",
	401: "Unauthorized",
	403: "Forbidden",
	404: "NotFound",
	405: "MethodNotAllowed",
	406: "NotAcceptable",
	409: "Conflict",
	410: "Gone",
	413: "RequestEntityTooLarge",
	415: "UnsupportedMediaType",
	422: "Invalid",
	429: "TooManyRequests",
	500: "InternalError",
	502: "InternalError",
	503: "ServiceUnavailable",
	504: "Timeout",
}

// Error codes.
const (
	// CodeInvalidRequest: a body, path or query the API cannot take (400).
	CodeInvalidRequest = "invalid_request"
	// CodeForbidden: the caller may not do this (403).
	CodeForbidden = "forbidden"
	// CodeNotFound: no such Dot, route or row (404).
	CodeNotFound = "not_found"
	// CodeMethodNotAllowed: the route has no such method (405).
	CodeMethodNotAllowed = "method_not_allowed"
	// CodeDotChanged: the Dot named is not the one the caller had, a Dot
	// made again under the same name (409).
	CodeDotChanged = "dot_changed"
	// CodeDotDeleting: the Dot is being deleted and takes no new work (409).
	CodeDotDeleting = "dot_deleting"
	// CodeAlreadyResolved: the Approval was answered already, here or
	// elsewhere (409). Approvals are answered through the resource API (a
	// merge patch of spec.decision, as kubectl patch does): the API server's
	// Conflict for a second answer has a message that starts with this
	// code and a colon, and a cause of this type.
	CodeAlreadyResolved = "already_resolved"
	// CodeNotPending: the outbox row was delivered or dropped meanwhile (a
	// cancel won the race): a send must not begin (409).
	CodeNotPending = "not_pending"
	// CodeTooLarge: the body is larger than the route takes (413).
	CodeTooLarge = "request_too_large"
	// CodeUnsupportedMediaType: a body that is not JSON (415).
	CodeUnsupportedMediaType = "unsupported_media_type"
	// CodeNotImplemented: this server does not serve the route (501).
	CodeNotImplemented = "not_implemented"
	// CodeUnavailable: the server cannot serve the route now, as while it
	// stops; try again (503).
	CodeUnavailable = "unavailable"
	// CodeInternal: the server failed; its log says why (500).
	CodeInternal = "internal"
)

// Limits.
const (
	// MaxMessageBody is the largest body of a posted message, in bytes.
	MaxMessageBody = 256 << 10
	// MaxMessagesPage is the most messages one read answers (ref 9.6).
	MaxMessagesPage = 500
	// MaxEventsPage is the most events one read of the log answers (ref
	// 9.6): a client paging through the log asks for this many, so a
	// shorter page is the last.
	MaxEventsPage = 1000
	// DefaultEventsPage is the page of a read that names no limit.
	DefaultEventsPage = 100
	// DefaultMessagesPage is the page of a read that names no limit.
	DefaultMessagesPage = 100
	// MaxEventBatch is the most guest events one ingestion takes.
	MaxEventBatch = 1000
	// MaxEventsBody is the largest body of an ingestion, in bytes.
	MaxEventsBody = 8 << 20
	// MaxAckBody is the largest body of an outbox acknowledgement, in bytes.
	MaxAckBody = 16 << 10
	// MaxReason is the longest reason of a failed or dropped row, in bytes.
	MaxReason = 1024
)

// People's routes.

// MessagesPath is where a Dot's conversation is posted to (PostMessage) and
// read from (Messages).
func MessagesPath(namespace, dot string) string {
	return Prefix + "namespaces/" + url.PathEscape(namespace) + "/dots/" + url.PathEscape(dot) + "/messages"
}

// DotEventsPath is where a Dot's event log is read (GET, EventsQuery).
func DotEventsPath(namespace, dot string) string {
	return Prefix + "namespaces/" + url.PathEscape(namespace) + "/dots/" + url.PathEscape(dot) + "/events"
}

// EventsQuery is the query of GET DotEventsPath (ref 9.6): events with ids
// after After, or before Before (Order desc only), of the Types (all when
// empty), the tool.called events narrowed to Tools (other types pass), of
// the task Task (data.task_id), at most Limit.
type EventsQuery struct {
	After  int64
	Before int64
	Limit  int
	Types  []string
	Tools  []string
	Task   string
	Order  string
}

// Values encodes q as a URL query.
func (q EventsQuery) Values() url.Values {
	v := url.Values{}
	if q.After != 0 {
		v.Set("after", strconv.FormatInt(q.After, 10))
	}
	if q.Before != 0 {
		v.Set("before", strconv.FormatInt(q.Before, 10))
	}
	if q.Limit != 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if len(q.Types) > 0 {
		v.Set("types", strings.Join(q.Types, ","))
	}
	if len(q.Tools) > 0 {
		v.Set("tools", strings.Join(q.Tools, ","))
	}
	if q.Task != "" {
		v.Set("task", q.Task)
	}
	if q.Order != "" {
		v.Set("order", q.Order)
	}
	return v
}

// Event is one event of a Dot's log.
type Event struct {
	ID   int64  `json:"id"`
	Type string `json:"type"`
	// Source is host for the control plane's own events, guest for the
	// guest's (whose GuestSeq is its sequence number).
	Source    string          `json:"source"`
	GuestSeq  *int64          `json:"guest_seq,omitempty"`
	Data      json.RawMessage `json:"data"`
	CreatedAt time.Time       `json:"created_at"`
}

// Events answers GET DotEventsPath.
type Events struct {
	Events []Event `json:"events"`
}

// PostMessage is the body of POST MessagesPath.
type PostMessage struct {
	Text string `json:"text"`
}

// MessageAccepted answers PostMessage (202): the message is logged as event
// EventID and queued for the guest.
type MessageAccepted struct {
	EventID int64 `json:"event_id"`
	Queued  bool  `json:"queued"`
}

// Order of a page.
const (
	OrderAsc  = "asc"
	OrderDesc = "desc"
)

// MessagesQuery is the query of GET MessagesPath (ref 9.6): oldest first by
// default; Order desc is newest first, and Before (desc only; the event id of
// the oldest message of the previous page) goes on, older, from there.
type MessagesQuery struct {
	// Limit is at most MaxMessagesPage; DefaultMessagesPage when 0.
	Limit  int
	Order  string
	Before int64
}

// Values encodes q as a URL query.
func (q MessagesQuery) Values() url.Values {
	v := url.Values{}
	if q.Limit != 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.Order != "" {
		v.Set("order", q.Order)
	}
	if q.Before != 0 {
		v.Set("before", strconv.FormatInt(q.Before, 10))
	}
	return v
}

// Roles of a message.
const (
	RoleUser      = "user"
	RoleAssistant = "assistant"
)

// Message is one message of a conversation, read from the event log.
type Message struct {
	EventID int64  `json:"event_id"`
	Role    string `json:"role"`
	Text    string `json:"text"`
	// MessageID is the id a person's message was delivered to the guest
	// with; an answer names it in InReplyTo.
	MessageID string   `json:"message_id,omitempty"`
	InReplyTo string   `json:"in_reply_to,omitempty"`
	SpentUSD  *float64 `json:"spent_usd,omitempty"`
	// Via is the messaging channel a person's message came through
	// (telegram), empty for the web client, the command line and programs.
	Via       string    `json:"via,omitempty"`
	CreatedAt time.Time `json:"created_at"`
}

// MessageID is the id the person's message logged as event eventID is
// delivered to the guest with (its user.message's outbox id): a Message
// carries it, and the guest's answer names it in InReplyTo
// (message.assistant's in_reply_to). It follows from the logged event, so a
// client that posted a message knows its id from the event id accepted.
func MessageID(eventID int64) string {
	return "message-" + strconv.FormatInt(eventID, 10)
}

// Messages answers GET MessagesPath.
type Messages struct {
	Messages []Message `json:"messages"`
}

// Host agents' routes.

func hostDotPath(host, namespace, dot string) string {
	return HostAgentPrefix + "hosts/" + url.PathEscape(host) + "/dots/" + url.PathEscape(namespace) + "/" + url.PathEscape(dot)
}

// EventsPath is where host's agent posts a batch of one Dot's guest events.
func EventsPath(host, namespace, dot string) string {
	return hostDotPath(host, namespace, dot) + "/events"
}

// OutboxPath is where host's agent reads a Dot's pending outbox rows.
func OutboxPath(host, namespace, dot string) string {
	return hostDotPath(host, namespace, dot) + "/outbox"
}

// HostOutboxPath is where host's agent waits for outbox rows of its Dots
// (GET, OutboxChanges): ?after= the cursor of its last answer, ?wait= how
// long to wait for one (a Go duration, at most MaxOutboxWait).
func HostOutboxPath(host string) string {
	return HostAgentPrefix + "hosts/" + url.PathEscape(host) + "/outbox"
}

// MaxOutboxWait bounds the wait of HostOutboxPath, well under the API
// server's timeout of a request.
const MaxOutboxWait = 30 * time.Second

// IsHostOutboxPath says whether path is a HostOutboxPath: a long poll, which
// the API server treats as a long-running request (like a stream) so that
// its shutdown does not wait for the poll's end.
func IsHostOutboxPath(path string) bool {
	rest, ok := strings.CutPrefix(path, HostAgentPrefix+"hosts/")
	host, tail, _ := strings.Cut(rest, "/")
	return ok && host != "" && tail == "outbox"
}

// IsLongRunningPath says whether the API server must treat a request of
// path as long-running: a stream, or a host agent's long poll.
func IsLongRunningPath(path string) bool {
	return IsStreamPath(path) || IsHostOutboxPath(path) || IsChannelLinkPath(path)
}

// DotRef names a Dot: namespace, name and UID.
type DotRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
}

// OutboxChanges answers GET HostOutboxPath: the Dots of the host that had
// rows enqueued since the cursor sent, and the cursor to send next. When
// Complete is false the cursor sent was not this server's (a restart, a
// first call, a lost notification) and Dots lists every Dot of the host with
// rows waiting: the agent looks at each. Dots is empty when the wait ended
// with nothing.
type OutboxChanges struct {
	Cursor   string   `json:"cursor"`
	Complete bool     `json:"complete"`
	Dots     []DotRef `json:"dots"`
}

// AckPath is where host's agent acknowledges the outbox row id.
func AckPath(host, namespace, dot, id string) string {
	return OutboxPath(host, namespace, dot) + "/" + url.PathEscape(id) + "/ack"
}

// EventBatch is the body of POST EventsPath: guest events of the Dot whose
// UID is DotUID, as the guest's stream gave them, their seq increasing. An
// empty batch stores nothing and answers the cursor, where the pump resumes.
type EventBatch struct {
	DotUID string                   `json:"dot_uid"`
	Events []protocol.OutboundEvent `json:"events"`
}

// Ingested answers EventBatch: how many events were stored now (those seen
// before are not stored again), how many of them stand as
// EventGuestRefused, and the Dot's cursor, the highest guest seq stored.
type Ingested struct {
	Stored  int   `json:"stored"`
	Refused int   `json:"refused"`
	Cursor  int64 `json:"cursor"`
}

// OutboxRow is a pending outbox row: the event to send the guest as it is
// sent (POST /v1/agent/events) and what the deliverer needs to know of it.
type OutboxRow struct {
	Seq   int64                 `json:"seq"`
	Event protocol.InboundEvent `json:"event"`
	// TaskUID and Run name the task run of a task.created.
	TaskUID   string     `json:"task_uid,omitempty"`
	Run       int        `json:"run,omitempty"`
	CreatedAt time.Time  `json:"created_at"`
	SentAt    *time.Time `json:"sent_at,omitempty"`
	Failures  int        `json:"failures"`
	LastError string     `json:"last_error,omitempty"`
	RetryAt   *time.Time `json:"retry_at,omitempty"`
}

// Outbox answers GET OutboxPath: the Dot's rows neither delivered nor
// dropped, in the order they are to be sent.
type Outbox struct {
	DotUID string      `json:"dot_uid"`
	Rows   []OutboxRow `json:"rows"`
}

// Outcome of a send, acknowledged by the deliverer.
type Outcome string

const (
	// OutcomeSent: a send begins (store.MarkSent). Acknowledge it before
	// the send: a row delivered or dropped meanwhile answers 409
	// CodeNotPending, and is not sent.
	OutcomeSent Outcome = "sent"
	// OutcomeDelivered: the guest answered 202 (store.MarkDelivered).
	OutcomeDelivered Outcome = "delivered"
	// OutcomeFailed: a send failed with a known outcome; Reason and RetryAt
	// are required (store.RecordFailure). An unknown outcome is not a
	// failure (ref 9.2): acknowledge nothing and send again.
	OutcomeFailed Outcome = "failed"
	// OutcomeDropped: the row is given up; Reason is required (store.Drop).
	OutcomeDropped Outcome = "dropped"
	// OutcomeGivenUp: a task's task.created is given up (ref 9.2: three
	// known failures, or one refusal): the row is dropped and its task
	// FAILED, logged as EventTaskFailed (TaskFailed) in the same
	// transaction; a task that ended meanwhile stays as it ended. Reason is
	// required (it becomes the task's error); only a task.created row
	// takes it (store.GiveUpTask).
	OutcomeGivenUp Outcome = "given_up"
)

// TaskFailed is the data of EventTaskFailed, the host's: the task the
// control plane gave up, and why.
type TaskFailed struct {
	TaskID string `json:"task_id"`
	Run    int    `json:"run,omitempty"`
	Error  string `json:"error"`
}

// Ack is the body of POST AckPath. Reason is the deliverer's own words
// (route, status, code; never the guest's text, ref 4.3), at most MaxReason
// bytes.
type Ack struct {
	Outcome Outcome    `json:"outcome"`
	Reason  string     `json:"reason,omitempty"`
	RetryAt *time.Time `json:"retry_at,omitempty"`
	// At is when the guest answered 202, by the deliverer's clock; only
	// OutcomeDelivered takes it. The row's delivery is then that moment,
	// not this acknowledgement's arrival, a round trip later, while the
	// guest already works on the row. The control plane keeps it only
	// between the send's start and its own now (a clock astray on another
	// host gives now).
	At *time.Time `json:"at,omitempty"`
}

// Acked answers Ack: the row's known failures so far. For OutcomeGivenUp,
// TaskFailed says whether this acknowledgement failed the task (false when
// the row had been delivered or dropped already).
type Acked struct {
	ID         string  `json:"id"`
	Outcome    Outcome `json:"outcome"`
	Failures   int     `json:"failures"`
	TaskFailed bool    `json:"task_failed,omitempty"`
}
