package wire

import (
	"net/url"
	"strconv"
	"strings"
	"time"
)

// The live stream of the event log (ref 9.6 GET /api/stream): server-sent
// events (text/event-stream) of the log as it is written, of every Dot the
// caller may read (StreamPath) or of one Dot (DotStreamPath). Each event of
// the log is one message:
//
//	id: <the event's id>
//	event: <its type>
//	data: <StreamEvent as JSON, on one line>
//
// A message with an id and no data moves the client's resume point on
// without an event: the server sends one when the stream begins at the end
// of the log, and before a keep-alive when events the caller does not get
// (other types, namespaces it may not read) went by since. A browser's
// EventSource records such an id and fires nothing. A comment line
// ": keep-alive" comes every StreamKeepAlive.
//
// A client resumes with the Last-Event-ID header (or ?after=, for clients
// that cannot set headers; the header wins): the server replays from the
// database every event after that id, then goes on live, with nothing lost
// or repeated, also across a restart of the server (ids are the
// database's). Without either, the stream begins at the end of the log.
// A client that does not keep up is cut off (the stream ends) rather than
// queued for without bound; it resumes with Last-Event-ID.

// StreamPath is the stream of every Dot the caller may read: RBAC decides
// per namespace (get on dots/events there).
const StreamPath = Prefix + "stream"

// DotStreamPath is the stream of one Dot (get on its dots/events).
func DotStreamPath(namespace, dot string) string {
	return Prefix + "namespaces/" + url.PathEscape(namespace) + "/dots/" + url.PathEscape(dot) + "/stream"
}

// IsStreamPath says whether path is one of the streams: the API server
// serves them as long-running requests, without its request timeout.
func IsStreamPath(path string) bool {
	if path == StreamPath {
		return true
	}
	rest, ok := strings.CutPrefix(path, Prefix+"namespaces/")
	if !ok {
		return false
	}
	parts := strings.Split(rest, "/")
	return len(parts) == 4 && parts[0] != "" && parts[1] == "dots" && parts[2] != "" && parts[3] == "stream"
}

// Server-sent events.
const (
	// StreamContentType is the stream's media type.
	StreamContentType = "text/event-stream"
	// LastEventIDHeader carries the id of the last event a client got.
	LastEventIDHeader = "Last-Event-ID"
	// StreamKeepAlive is how often the server writes a keep-alive comment,
	// so that proxies and clients see an idle stream is alive.
	StreamKeepAlive = 15 * time.Second
)

// StreamQuery is the query of GET StreamPath and DotStreamPath.
type StreamQuery struct {
	// After is the id to resume after (?after=; Last-Event-ID wins over
	// it); nil begins at the end of the log, 0 replays the whole log.
	After *int64
	// Types keeps the events of these types; empty keeps every type.
	Types []string
}

// Values encodes q as a URL query.
func (q StreamQuery) Values() url.Values {
	v := url.Values{}
	if q.After != nil {
		v.Set("after", strconv.FormatInt(*q.After, 10))
	}
	if len(q.Types) > 0 {
		v.Set("types", strings.Join(q.Types, ","))
	}
	return v
}

// StreamEvent is the data of a stream's message: the event and its Dot.
type StreamEvent struct {
	Event
	Namespace string `json:"namespace"`
	Dot       string `json:"dot"`
	DotUID    string `json:"dot_uid"`
}
