package dotsapi

import (
	"bytes"
	"net/http"
	"strconv"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
)

// screenshot answers the Dot's desktop as dot-agentd's GET /v1/screenshot
// gives it, a PNG; the guest's refusals (no_display, screenshot_failed) pass
// through. The answer is typed image/png only when it is one.
func (h *Handler) screenshot(w http.ResponseWriter, r *http.Request) error {
	g, err := h.guestFor(r, "get", screenshotSubresource)
	if err != nil {
		return err
	}
	return h.passImage(w, r, g, protocol.PathScreenshot, "screenshot", pngImage)
}

// imageKind is a kind of image a guest answers: its content type, its name
// in an error, and the bytes every such file begins with.
type imageKind struct {
	contentType, name string
	signature         []byte
}

var (
	pngImage  = imageKind{"image/png", "PNG", []byte("\x89PNG\r\n\x1a\n")}
	jpegImage = imageKind{"image/jpeg", "JPEG", []byte{0xff, 0xd8, 0xff}}
)

// passImage answers the image the guest's path gives, typed as kind only
// when it begins with kind's signature: a guest is untrusted from here, so
// an answer that is not the image it should be is a 502, never passed on
// under a type a browser would render.
func (h *Handler) passImage(w http.ResponseWriter, r *http.Request, g dotGuest, path, what string, kind imageKind) error {
	resp, cancel, err := h.guestGet(r.Context(), g, path)
	if err != nil {
		return err
	}
	defer cancel()
	defer resp.Body.Close()
	data, ok, err := readAnswer(resp, wire.MaxGuestAnswer)
	switch {
	case err != nil:
		return apiErrorf(http.StatusServiceUnavailable, wire.CodeGuestUnavailable, "the guest's %s broke off", what)
	case !ok:
		return apiErrorf(http.StatusBadGateway, wire.CodeGuestError, "the guest's %s is larger than %d bytes", what, wire.MaxGuestAnswer)
	case !bytes.HasPrefix(data, kind.signature):
		return apiErrorf(http.StatusBadGateway, wire.CodeGuestError, "the guest's %s is not a %s", what, kind.name)
	}
	hdr := w.Header()
	hdr.Set("Content-Type", kind.contentType)
	hdr.Set("Content-Security-Policy", wire.FileCSP)
	hdr.Set("Content-Length", strconv.Itoa(len(data)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(data)
	return nil
}
