package dotsapi

import (
	"net/http"
	"time"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
)

// The subresource of a Dot's spend: dots-editor and dots-viewer get it.
const usageSubresource = "usage"

// usage answers the model spend the Dot's guest reported since ?since=
// (RFC 3339; the first event when absent), from the event log alone (ref
// 9.6): the sum of spent_usd over wire.SpendEventTypes, by the time the
// host stored them. Work that never reported an end (a cancelled task) is
// not in it.
func (h *Handler) usage(w http.ResponseWriter, r *http.Request) error {
	p, err := pathValues(r, "ns", "name")
	if err != nil {
		return err
	}
	ns, name := p[0], p[1]
	if err := h.authorizeDot(r, "get", usageSubresource, ns, name); err != nil {
		return err
	}
	raw, err := onlyParam(r, "since")
	if err != nil {
		return err
	}
	var q wire.UsageQuery
	if raw != "" {
		since, err := time.Parse(time.RFC3339Nano, raw)
		if err != nil {
			return badRequest("since %q is not a time in RFC 3339 (2026-01-02T15:04:05Z)", raw)
		}
		q.Since = &since
	}
	d, err := h.getDot(r.Context(), ns, name)
	if err != nil {
		return err
	}
	var since time.Time
	if q.Since != nil {
		since = *q.Since
	}
	spent, err := h.store.SpentUSD(r.Context(), string(d.UID), wire.SpendEventTypes, since)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, wire.Usage{Dot: dotRef(d), Since: q.Since, SpentUSD: protocol.RoundUSD(spent)})
	return nil
}
