package dotsapi

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
	"github.com/invisible-dots/invisible-dots/internal/store"
)

// The subresource people read a Dot's event log with: dots-editor and
// dots-viewer both get it.
const eventsSubresource = "events"

// eventsPage is the page of the Dot's event log a request of the events
// route (or the activity route, which words the same page) asks for: the
// caller's right to read the log checked, the query read, filtered in the
// database.
func (h *Handler) eventsPage(r *http.Request) ([]store.Event, error) {
	d, err := h.dotOf(r, "get", eventsSubresource)
	if err != nil {
		return nil, err
	}
	q, err := parseEventsQuery(r)
	if err != nil {
		return nil, err
	}
	return h.store.Events(r.Context(), store.EventQuery{
		DotUID: string(d.UID), Types: q.Types, Tools: q.Tools, TaskID: q.Task,
		After: q.After, Before: q.Before, Desc: q.Order == wire.OrderDesc, Limit: q.Limit,
	})
}

// getEvents reads a page of the Dot's event log (ref 9.6), filtered in the
// database.
func (h *Handler) getEvents(w http.ResponseWriter, r *http.Request) error {
	events, err := h.eventsPage(r)
	if err != nil {
		return err
	}
	out := wire.Events{Events: make([]wire.Event, 0, len(events))}
	for _, e := range events {
		out.Events = append(out.Events, wireEvent(e))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func wireEvent(e store.Event) wire.Event {
	return wire.Event{ID: e.ID, Type: e.Type, Source: string(e.Source), GuestSeq: e.GuestSeq, Data: e.Data, CreatedAt: e.CreatedAt}
}

// parseEventsQuery reads the log's parameters; anything else is refused,
// so a misspelt parameter is not silently ignored.
func parseEventsQuery(r *http.Request) (wire.EventsQuery, error) {
	pg := page{limit: wire.DefaultEventsPage, order: wire.OrderAsc}
	var q wire.EventsQuery
	for key, vals := range r.URL.Query() {
		if len(vals) != 1 {
			return q, badRequest("%s is given %d times; give it once (types and tools take a comma-separated list)", key, len(vals))
		}
		v := vals[0]
		if ok, err := pageParam(key, v, wire.MaxEventsPage, &pg); ok {
			if err != nil {
				return q, err
			}
			continue
		}
		var err error
		switch key {
		case "after":
			q.After, err = eventID(key, v)
		case "types":
			q.Types, err = eventTypes(v)
		case "tools":
			q.Tools = commaList(v)
		case "task":
			q.Task = v
		default:
			return q, badRequest("unknown query parameter %q (the parameters are after, before, limit, types, tools, task and order)", key)
		}
		if err != nil {
			return q, err
		}
	}
	q.Limit, q.Order, q.Before = pg.limit, pg.order, pg.before
	return q, pg.check()
}

// eventID reads the event id v of the parameter key.
func eventID(key, v string) (int64, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, badRequest("%s %q is not an event id", key, v)
	}
	return n, nil
}

// eventTypes reads a comma-separated list of the log's event types.
func eventTypes(v string) ([]string, error) {
	types := commaList(v)
	for _, t := range types {
		if !wire.IsEventType(t) {
			return nil, badRequest("types: %q is not an event type of the log", t)
		}
	}
	return types, nil
}

func commaList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}
