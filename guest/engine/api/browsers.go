package api

import (
	"errors"
	"net/http"

	"github.com/invisible-dots/invisible-dots/guest/engine/browser"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// The browser identity routes of ref 5.3. No route launches an identity: only
// the model's tools open a browser, so browser.identity.launch alone decides
// whether one starts. A frame and a close are the owner's, not the Dot's, so
// no permission of the Dot applies to them.

func (s *Server) browserError(w http.ResponseWriter, err error) {
	var be *browser.Error
	if errors.As(err, &be) {
		writeError(w, be.Code, be.Message)
		return
	}
	writeError(w, protocol.ErrInternal, err.Error())
}

func (s *Server) browserList(w http.ResponseWriter, r *http.Request) {
	list, err := s.Browsers.List(r.Context())
	if err != nil {
		s.browserError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, protocol.BrowserIdentities{Identities: list})
}

func (s *Server) browserCreate(w http.ResponseWriter, r *http.Request) {
	// DecodeJSON's messages never quote the body, which may hold a proxy.
	var req protocol.BrowserIdentityCreate
	if !decodeBody(w, r, protocol.ErrInvalid, &req) {
		return
	}
	bi, err := s.Browsers.Create(r.Context(), req.Name, req.Proxy)
	if err != nil {
		s.browserError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, bi)
}

func (s *Server) browserGet(w http.ResponseWriter, r *http.Request) {
	bi, err := s.Browsers.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		s.browserError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, bi)
}

func (s *Server) browserDelete(w http.ResponseWriter, r *http.Request) {
	if err := s.Browsers.Delete(r.Context(), r.PathValue("id")); err != nil {
		s.browserError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) browserClose(w http.ResponseWriter, r *http.Request) {
	if err := s.Browsers.Close(r.Context(), r.PathValue("id")); err != nil {
		s.browserError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) browserFrame(w http.ResponseWriter, r *http.Request) {
	frame, err := s.Browsers.Frame(r.Context(), r.PathValue("id"))
	if err != nil {
		s.browserError(w, err)
		return
	}
	w.Header().Set("Content-Type", "image/jpeg")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(frame)
}
