package dotsapi

import (
	"mime"
	"net/http"
	"net/url"
	"path"
	"strconv"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
)

// listFiles lists a directory of the Dot's home through dot-agentd's GET
// /v1/files/list (ref 9.6): the home when path says nothing.
func (h *Handler) listFiles(w http.ResponseWriter, r *http.Request) error {
	g, abs, err := h.fileRequest(r, false)
	if err != nil {
		return err
	}
	route := protocol.PathFilesList
	resp, cancel, err := h.guestGet(r.Context(), g, route+"?"+url.Values{protocol.QueryPath: {abs}}.Encode())
	if err != nil {
		return err
	}
	defer cancel()
	defer resp.Body.Close()
	var list protocol.ListResponse
	if err := decodeAnswer(resp, route, &list); err != nil {
		return err
	}
	out := wire.FileList{Path: abs, Entries: list.Entries}
	if out.Entries == nil {
		out.Entries = []protocol.ListEntry{}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// readFile answers the bytes of a file of the Dot's home through
// dot-agentd's GET /v1/files, at most wire.MaxFileBytes of them, read whole
// before a byte is sent: a larger file is a 413 file_too_large, its reading
// stopped as soon as it passes the limit. The bytes are the Dot's own, so
// the answer's type comes from wire.FileTypeOf alone, never from them, and
// the answer runs nothing in a browser: nosniff (ServeHTTP), a
// sandboxing Content-Security-Policy, no-store.
func (h *Handler) readFile(w http.ResponseWriter, r *http.Request) error {
	g, abs, err := h.fileRequest(r, true)
	if err != nil {
		return err
	}
	resp, cancel, err := h.guestGet(r.Context(), g, protocol.PathFiles+"?"+url.Values{protocol.QueryPath: {abs}}.Encode())
	if err != nil {
		return err
	}
	defer cancel()
	defer resp.Body.Close()
	data, ok, err := readAnswer(resp, wire.MaxFileBytes)
	if err != nil {
		return apiErrorf(http.StatusServiceUnavailable, wire.CodeGuestUnavailable, "the guest's answer with %s broke off", abs)
	}
	if !ok {
		return apiErrorf(http.StatusRequestEntityTooLarge, wire.CodeFileTooLarge, "%s is larger than %d MiB, the most a read answers", abs, wire.MaxFileBytes>>20)
	}
	t := wire.FileTypeOf(abs)
	disposition := "inline"
	if t.Kind == wire.FileDownload {
		disposition = "attachment"
	}
	hdr := w.Header()
	hdr.Set("Content-Type", t.ContentType)
	if d := mime.FormatMediaType(disposition, map[string]string{"filename": path.Base(abs)}); d != "" {
		disposition = d
	}
	hdr.Set("Content-Disposition", disposition)
	hdr.Set("Content-Security-Policy", wire.FileCSP)
	hdr.Set("Content-Length", strconv.Itoa(len(data)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(data)
	return nil
}

// fileRequest checks a file route's caller and path, then finds the Dot's
// guest. The path check comes first and is lexical: a path outside home
// or with a ".." segment is refused without a call to the guest, whose own
// check (links resolved) has the last word.
func (h *Handler) fileRequest(r *http.Request, needPath bool) (dotGuest, string, error) {
	p, err := pathValues(r, "ns", "name")
	if err != nil {
		return dotGuest{}, "", err
	}
	ns, name := p[0], p[1]
	if err := h.authorizeDot(r, "get", filesSubresource, ns, name); err != nil {
		return dotGuest{}, "", err
	}
	raw, err := onlyParam(r, protocol.QueryPath)
	if err != nil {
		return dotGuest{}, "", err
	}
	if needPath && raw == "" {
		return dotGuest{}, "", apiErrorf(http.StatusBadRequest, wire.CodeInvalidPath, "path is required: the file to read, under %s", wire.DotHome)
	}
	abs, ok := wire.HomePath(raw)
	if !ok {
		return dotGuest{}, "", apiErrorf(http.StatusBadRequest, wire.CodeInvalidPath, "path %q is not under %s (absolute, relative to the home, or ~/..., with no .. segment)", raw, wire.DotHome)
	}
	g, err := h.guestOf(r.Context(), ns, name)
	return g, abs, err
}

// onlyParam reads the one query parameter a route takes ("" when absent)
// and refuses any other, so a misspelt parameter is not silently ignored.
func onlyParam(r *http.Request, key string) (string, error) {
	var v string
	for k, vals := range r.URL.Query() {
		if k != key {
			return "", badRequest("unknown query parameter %q (the one parameter is %s)", k, key)
		}
		if len(vals) != 1 {
			return "", badRequest("%s is given %d times; give it once", k, len(vals))
		}
		v = vals[0]
	}
	return v, nil
}
