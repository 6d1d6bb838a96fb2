package dotsapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
	"github.com/invisible-dots/invisible-dots/internal/store"
)

// The subresource people are given the chat of a Dot with: dots-editor may
// create and get it, dots-viewer get it.
const messagesSubresource = "messages"

// postMessage logs the person's message and queues it for the guest in one
// transaction, then asks the Waker to wake the Dot.
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
	dot := storeDot(d)
	logged, err := json.Marshal(wire.MessageUser{Text: body.Text})
	if err != nil {
		return err
	}
	inbound, err := json.Marshal(protocol.UserMessage{Text: body.Text})
	if err != nil {
		return err
	}
	var eventID int64
	err = h.store.InTx(r.Context(), func(tx pgx.Tx) error {
		stored, err := store.AppendEventsTx(r.Context(), tx, store.Event{
			Dot: dot, Type: wire.EventMessageUser, Source: store.SourceHost, Data: logged,
		})
		if err != nil {
			return err
		}
		if len(stored) != 1 {
			return fmt.Errorf("the message of dot %s/%s was not stored", ns, name)
		}
		eventID = stored[0].ID
		// The row follows from the logged event: the same event gives the
		// same id (DESIGN.md 4).
		_, err = store.EnqueueTx(r.Context(), tx, store.Inbound{
			ID: store.MessageID(eventID), Dot: dot, Type: protocol.InboundUserMessage, Data: inbound, TS: stored[0].CreatedAt,
		})
		return err
	})
	if err != nil {
		return err
	}
	if h.waker != nil {
		// The message is queued whatever happens here: a failed wake is
		// the wake logic's to retry, not a failed post.
		if err := h.waker.Wake(r.Context(), dot); err != nil {
			h.log.Error(err, "could not wake the Dot for a message", "dot", ns+"/"+name)
		}
	}
	writeJSON(w, http.StatusAccepted, wire.MessageAccepted{EventID: eventID, Queued: true})
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
