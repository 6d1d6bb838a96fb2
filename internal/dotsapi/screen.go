package dotsapi

import (
	"bytes"
	"net/http"
	"strconv"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
)

// pngSignature starts every PNG file.
var pngSignature = []byte("\x89PNG\r\n\x1a\n")

// screenshot answers the Dot's desktop as dot-agentd's GET /v1/screenshot
// gives it, a PNG; the guest's refusals (no_display, screenshot_failed) pass
// through. The answer is typed image/png only when it is one.
func (h *Handler) screenshot(w http.ResponseWriter, r *http.Request) error {
	p, err := pathValues(r, "ns", "name")
	if err != nil {
		return err
	}
	ns, name := p[0], p[1]
	if err := h.authorizeDot(r, "get", screenshotSubresource, ns, name); err != nil {
		return err
	}
	if len(r.URL.Query()) > 0 {
		return badRequest("the screenshot takes no query parameters")
	}
	g, err := h.guestOf(r.Context(), ns, name)
	if err != nil {
		return err
	}
	resp, cancel, err := h.guestGet(r.Context(), g, protocol.PathScreenshot)
	if err != nil {
		return err
	}
	defer cancel()
	defer resp.Body.Close()
	data, ok, err := readAnswer(resp, wire.MaxGuestAnswer)
	switch {
	case err != nil:
		return apiErrorf(http.StatusServiceUnavailable, wire.CodeGuestUnavailable, "the guest's screenshot broke off")
	case !ok:
		return apiErrorf(http.StatusBadGateway, wire.CodeGuestError, "the guest's screenshot is larger than %d bytes", wire.MaxGuestAnswer)
	case !bytes.HasPrefix(data, pngSignature):
		return apiErrorf(http.StatusBadGateway, wire.CodeGuestError, "the guest's screenshot is not a PNG")
	}
	hdr := w.Header()
	hdr.Set("Content-Type", "image/png")
	hdr.Set("Content-Security-Policy", wire.FileCSP)
	hdr.Set("Content-Length", strconv.Itoa(len(data)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(data)
	return nil
}
