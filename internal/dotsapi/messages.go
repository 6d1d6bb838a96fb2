package dotsapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
	"github.com/invisible-dots/invisible-dots/internal/store"
)

// The subresource people are given the chat of a Dot with: dots-editor may
// create and get it, dots-viewer get it.
const messagesSubresource = "messages"

// postMessage answers a person's message: the store logs it and queues it
// for the guest (store.PostMessage); this route decodes, limits and
// authorizes it, and says 202 with the event it was logged as.
func (h *Handler) postMessage(w http.ResponseWriter, r *http.Request) error {
	p, err := pathValues(r, "ns", "name")
	if err != nil {
		return err
	}
	ns, name := p[0], p[1]
	if err := h.authorizeDot(r, "create", messagesSubresource, ns, name); err != nil {
		return err
	}
	var body wire.PostMessage
	if err := decode(w, r, wire.MaxMessageBody, &body); err != nil {
		return err
	}
	if strings.TrimSpace(body.Text) == "" {
		return badRequest("text is empty: a message needs words")
	}
	d, err := h.getDot(r.Context(), ns, name)
	if err != nil {
		return err
	}
	if d.DeletionTimestamp != nil {
		return apiErrorf(http.StatusConflict, wire.CodeDotDeleting, "the Dot %s/%s is being deleted and takes no messages", ns, name)
	}
	posted, err := h.store.PostMessage(r.Context(), storeDot(d), body.Text, store.Origin{Channel: store.ChannelAPI})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusAccepted, wire.MessageAccepted{EventID: posted.EventID, Queued: true})
	return nil
}

// getMessages reads the conversation, the person's and the Dot's messages,
// from the log, paged as ref 9.6 says.
func (h *Handler) getMessages(w http.ResponseWriter, r *http.Request) error {
	d, err := h.dotOf(r, "get", messagesSubresource)
	if err != nil {
		return err
	}
	q, err := parseMessagesQuery(r)
	if err != nil {
		return err
	}
	events, err := h.store.Events(r.Context(), store.EventQuery{
		DotUID: string(d.UID),
		Types:  []string{wire.EventMessageUser, protocol.EventMessageAssistant},
		Before: q.Before,
		Desc:   q.Order == wire.OrderDesc,
		Limit:  q.Limit,
	})
	if err != nil {
		return err
	}
	out := wire.Messages{Messages: make([]wire.Message, 0, len(events))}
	for _, e := range events {
		m, err := messageOf(e)
		if err != nil {
			// The log holds what was validated when it was stored; a row
			// that does not read is reported, not a reason to hide the rest.
			h.log.Error(err, "a logged message does not read", "dot", d.Namespace+"/"+d.Name, "event", e.ID)
			continue
		}
		out.Messages = append(out.Messages, m)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func messageOf(e store.Event) (wire.Message, error) {
	m := wire.Message{EventID: e.ID, CreatedAt: e.CreatedAt}
	switch e.Type {
	case wire.EventMessageUser:
		var d wire.MessageUser
		if err := json.Unmarshal(e.Data, &d); err != nil {
			return m, fmt.Errorf("read %s %d: %w", e.Type, e.ID, err)
		}
		m.Role, m.Text, m.MessageID = wire.RoleUser, d.Text, store.MessageID(e.ID)
		if d.Origin != nil {
			m.Via = d.Origin.Channel
		}
	case protocol.EventMessageAssistant:
		var d protocol.MessageAssistant
		if err := json.Unmarshal(e.Data, &d); err != nil {
			return m, fmt.Errorf("read %s %d: %w", e.Type, e.ID, err)
		}
		m.Role, m.Text, m.SpentUSD = wire.RoleAssistant, d.Text, d.SpentUSD
		if d.InReplyTo != nil {
			m.InReplyTo = *d.InReplyTo
		}
	default:
		return m, fmt.Errorf("event %d is a %s, not a message", e.ID, e.Type)
	}
	return m, nil
}

// parseMessagesQuery reads limit, order and before; anything else in the
// query is refused, so a misspelt parameter is not silently ignored.
func parseMessagesQuery(r *http.Request) (wire.MessagesQuery, error) {
	pg := page{limit: wire.DefaultMessagesPage, order: wire.OrderAsc}
	for key, vals := range r.URL.Query() {
		if len(vals) != 1 {
			return wire.MessagesQuery{}, badRequest("%s is given %d times; give it once", key, len(vals))
		}
		ok, err := pageParam(key, vals[0], wire.MaxMessagesPage, &pg)
		if err != nil {
			return wire.MessagesQuery{}, err
		}
		if !ok {
			return wire.MessagesQuery{}, badRequest("unknown query parameter %q (the parameters are limit, order and before)", key)
		}
	}
	return wire.MessagesQuery{Limit: pg.limit, Order: pg.order, Before: pg.before}, pg.check()
}
