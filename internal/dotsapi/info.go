package dotsapi

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
	"github.com/invisible-dots/invisible-dots/internal/keystore"
	"github.com/invisible-dots/invisible-dots/internal/version"
)

// ServerInfo is what the health route says of the server: where its state
// lives.
type ServerInfo struct {
	// DatabaseKind is wire.DatabaseManaged or wire.DatabaseExternal.
	DatabaseKind string
	// Home is INVISIBLE_DOTS_HOME as the server resolved it; LogsDir its
	// logs/.
	Home    string
	LogsDir string
}

// Words of Health for what is not well.
const (
	healthDegraded      = "degraded"
	databaseUnreachable = "unreachable"
)

// health answers the server's health (ref 9.6). Every authenticated user
// may read it (dots-api-access): it says whether a key is stored, never
// the key, and where the state lives.
func (h *Handler) health(w http.ResponseWriter, r *http.Request) error {
	if len(r.URL.Query()) > 0 {
		return badRequest("the health takes no query parameters")
	}
	out := wire.Health{
		Status: wire.StatusOK, Database: wire.StatusOK, Version: version.Version,
		DatabaseKind: h.server.DatabaseKind, Home: h.server.Home, LogsDir: h.server.LogsDir,
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	if err := h.store.Ping(ctx); err != nil {
		h.log.Error(err, "the database does not answer the health's ping")
		out.Status, out.Database = healthDegraded, databaseUnreachable
	}
	stored, err := keystore.DefaultKeyStored(ctx, h.dots)
	if err != nil {
		h.log.Error(err, "the health could not read whether the default key is stored")
		out.Status = healthDegraded
	}
	out.OpenRouterConfigured = stored
	writeJSON(w, http.StatusOK, out)
	return nil
}

// runDoctor answers the doctor's report of the host the server runs on, the
// rows of `invisible-dots doctor --json` (ref 11.1). RBAC lets only
// administrators and holders of dots-doctor through (config/rbac): it
// describes the machine, and it runs QEMU's accelerator probe.
func (h *Handler) runDoctor(w http.ResponseWriter, r *http.Request) error {
	if h.doctor == nil {
		return apiErrorf(http.StatusNotImplemented, wire.CodeNotImplemented, "this server does not run the doctor")
	}
	if len(r.URL.Query()) > 0 {
		return badRequest("the doctor takes no query parameters")
	}
	rep, err := h.doctor.report(r.Context())
	if err != nil {
		return apiErrorf(http.StatusServiceUnavailable, wire.CodeInternal, "the request ended before the doctor did: %v", err)
	}
	writeJSON(w, http.StatusOK, rep)
	return nil
}

// doctorTimeout bounds a run: the accelerator probe alone may take 30 s,
// twice when the second CPU model is tried.
const doctorTimeout = 2 * time.Minute

// doctorRuns runs the doctor once at a time: callers that ask while it runs
// share its report, so a burst of requests starts one QEMU probe, not one
// each.
type doctorRuns struct {
	run func(ctx context.Context) wire.DoctorReport

	mu      sync.Mutex
	running *doctorRun
}

type doctorRun struct {
	done chan struct{}
	rep  wire.DoctorReport
}

func (d *doctorRuns) report(ctx context.Context) (wire.DoctorReport, error) {
	d.mu.Lock()
	cur := d.running
	if cur == nil {
		cur = &doctorRun{done: make(chan struct{})}
		d.running = cur
		// The run is every waiting caller's: the first one leaving does not
		// end it for the others.
		runCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), doctorTimeout)
		go func() {
			defer cancel()
			cur.rep = d.run(runCtx)
			d.mu.Lock()
			d.running = nil
			d.mu.Unlock()
			close(cur.done)
		}()
	}
	d.mu.Unlock()
	select {
	case <-cur.done:
		return cur.rep, nil
	case <-ctx.Done():
		return wire.DoctorReport{}, ctx.Err()
	}
}
