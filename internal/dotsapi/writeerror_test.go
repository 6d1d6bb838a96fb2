package dotsapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"

	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
)

// A request whose context ended (its caller went away, or the server stops
// under a host agent's long poll) is not the server failing: no error in
// the log, a 503 that says to try again. The same error on a request still
// live is the server's own failure.
func TestWriteErrorOfAnEndedRequest(t *testing.T) {
	for _, tc := range []struct {
		reason     string
		ended      bool
		err        error
		wantStatus int
		wantCode   string
		wantLogged bool
	}{
		{reason: "an ended request's canceled read", ended: true, err: fmt.Errorf("read the outbox: %w", context.Canceled),
			wantStatus: http.StatusServiceUnavailable, wantCode: wire.CodeUnavailable},
		{reason: "a live request's canceled read is the server's failure", err: fmt.Errorf("read the outbox: %w", context.Canceled),
			wantStatus: http.StatusInternalServerError, wantCode: wire.CodeInternal, wantLogged: true},
		{reason: "an ended request's other failure", ended: true, err: errors.New("the database refused"),
			wantStatus: http.StatusInternalServerError, wantCode: wire.CodeInternal, wantLogged: true},
	} {
		t.Run(tc.reason, func(t *testing.T) {
			var errorsLogged []string
			log := funcr.New(func(_, args string) {
				if strings.Contains(args, `"error"=`) {
					errorsLogged = append(errorsLogged, args)
				}
			}, funcr.Options{Verbosity: 10})
			h := &Handler{log: log}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.ended {
				cancel()
			}
			r := httptest.NewRequestWithContext(ctx, http.MethodGet, wire.OutboxPath("host-1", "team-a", "helper"), nil)
			w := httptest.NewRecorder()
			h.writeError(w, r, tc.err)
			var body wire.Error
			if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
				t.Fatalf("answer %q is not an error body: %v", w.Body.String(), err)
			}
			if w.Code != tc.wantStatus || body.Code != tc.wantCode {
				t.Errorf("answered %d %q, want %d %q", w.Code, body.Code, tc.wantStatus, tc.wantCode)
			}
			if logged := len(errorsLogged) > 0; logged != tc.wantLogged {
				t.Errorf("error logged = %v (%q), want %v", logged, errorsLogged, tc.wantLogged)
			}
		})
	}
}
