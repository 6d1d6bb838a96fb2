package door

import (
	"net/http"
	"strings"
)

var methods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// Allowed lists the methods mux serves r's path with under a pattern other
// than catchAll (the mux's "/" fallback). A fallback answers 405 with them
// in Allow when there are any, and 404 otherwise.
func Allowed(mux *http.ServeMux, r *http.Request, catchAll string) []string {
	var allow []string
	for _, m := range methods {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := mux.Handler(probe); pattern != "" && pattern != catchAll && !strings.HasSuffix(pattern, " "+catchAll) {
			allow = append(allow, m)
		}
	}
	return allow
}
