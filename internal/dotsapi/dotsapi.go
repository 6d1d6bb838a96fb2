// Package dotsapi serves the Dots API (DESIGN.md 2): what is not a resource,
// on non-resource paths under /dots/v1/ of the API server's own HTTPS port.
// The handler is mounted behind the API server's filters, so a request
// reaching it is authenticated and RBAC let its path through
// (nonResourceURLs). nonResourceURLs are cluster-wide, so each route of a Dot
// also asks the server's authorizer, with resource attributes, whether the
// caller may act on that Dot in its namespace (a subresource such as
// dots/messages); the host agents' routes check that the caller is the
// agent of the host it names.
//
// The shapes are in internal/dotsapi/wire; the Go client is
// internal/dotsapi/client.
//
// Against a cluster that is not ours the server runs this handler with the
// controllers' credential, so their role holds what it reads and writes
// beyond the controllers' own: Secrets (a Dot's MCP secrets, the default
// key's presence, a Webhook's signing secret) and the Webhooks whose
// secrets it makes (their Secrets block their deletion, which takes update
// on webhooks/finalizers where owner references' permissions are enforced).
//
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;create;update;patch
// +kubebuilder:rbac:groups=dots.invisible.dev,resources=webhooks,verbs=get;patch
// +kubebuilder:rbac:groups=dots.invisible.dev,resources=webhooks/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=serviceaccounts,verbs=get
// +kubebuilder:rbac:groups=dots.invisible.dev,resources=dots,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=dots.invisible.dev,resources=dotquotas,verbs=get;list;watch
package dotsapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-logr/logr"
	"golang.org/x/sync/semaphore"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/internal/channels/hub"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
	"github.com/invisible-dots/invisible-dots/internal/pgtext"
	"github.com/invisible-dots/invisible-dots/internal/store"
)

// Options configure New.
type Options struct {
	// Store is the event log and the outbox.
	Store *store.Store
	// Reader reads Dots and Computers with the control plane's own
	// credential; the caller's right is checked first, with Authorizer.
	Reader client.Reader
	// Authorizer is the API server's own (RBAC and the privileged groups).
	Authorizer authorizer.Authorizer
	// Changes follows the outbox's notifications (store.OutboxChannel) for
	// the host agents' long poll; nil answers that route 501.
	Changes *store.Changes
	// Feed follows the event log for the live streams (Feed.Run runs it);
	// nil answers the stream routes 501.
	Feed *Feed
	// StreamKeepAlive is the time between a stream's keep-alive comments,
	// wire.StreamKeepAlive when 0.
	StreamKeepAlive time.Duration
	// StreamAccessTTL is how long a stream trusts the authorizer's answer
	// for a namespace before asking again, 30 s when 0: a binding revoked
	// takes effect on open streams within it.
	StreamAccessTTL time.Duration
	// Clock stamps acknowledgements and times the streams' access
	// answers; the real clock when nil.
	Clock clock.PassiveClock
	Log   logr.Logger
	// Guests reaches the guest of a Computer through its host's agent
	// (HostGuests, whatever machine the host is); nil reaches none (the
	// guest routes answer 502 host_unreachable).
	Guests Guests
	// Client writes a Dot's Secret (its MCP secrets) and the annotation
	// that tells its host agent, with the control plane's own credential,
	// once the caller's right is checked; nil answers those writes 501.
	Client client.Client
	// Server describes this server for the health route.
	Server ServerInfo
	// Channels are the messaging channel types the server runs (ref 9.8),
	// whose credentials the channel routes check before they store them.
	Channels hub.Kinds
	// ChannelLinks streams the codes of a Channel being linked by a code;
	// nil answers that route channel_off.
	ChannelLinks ChannelLinks
	// Doctor runs the doctor of the server's host (hostagent/doctor); nil
	// answers the doctor route 501.
	Doctor func(ctx context.Context) wire.DoctorReport
	// OpenAIAnswerWait bounds how long a chat completion of the
	// OpenAI-compatible endpoint waits for the Dot's answer, 10 minutes
	// when 0.
	OpenAIAnswerWait time.Duration
	// OpenAIMaxWaits is the most chat completions that wait for an
	// answer at once, 256 when 0; one more is refused with a 429.
	OpenAIMaxWaits int
	// WebURL is the web client's address, named where a person answers an
	// approval (its Inbox); empty names none.
	WebURL string
}

// Handler serves every route under wire.Prefix.
type Handler struct {
	store     *store.Store
	changes   *store.Changes
	feed      *Feed
	keepAlive time.Duration
	accessTTL time.Duration
	dots      client.Reader
	authz     authorizer.Authorizer
	clock     clock.PassiveClock
	log       logr.Logger
	mux       *http.ServeMux
	guests    Guests
	writer    client.Client
	server    ServerInfo
	doctor    *doctorRuns
	// channelKinds are the channel types the server runs.
	channelKinds hub.Kinds
	channelLinks ChannelLinks
	// answerWait and webURL are the OpenAI-compatible endpoint's.
	answerWait     time.Duration
	webURL         string
	openAIMaxWaits int
	openAIWaits    *semaphore.Weighted
}

var _ http.Handler = (*Handler)(nil)

// New returns the handler of the Dots API.
func New(o Options) (*Handler, error) {
	if o.Store == nil || o.Reader == nil || o.Authorizer == nil {
		return nil, errors.New("the Dots API needs its store, a reader of Dots and the API server's authorizer")
	}
	h := &Handler{
		store: o.Store, changes: o.Changes, feed: o.Feed, keepAlive: o.StreamKeepAlive, accessTTL: o.StreamAccessTTL,
		dots: o.Reader, authz: o.Authorizer, clock: o.Clock, log: o.Log,
	}
	if h.clock == nil {
		h.clock = clock.RealClock{}
	}
	if h.keepAlive <= 0 {
		h.keepAlive = wire.StreamKeepAlive
	}
	if h.accessTTL <= 0 {
		h.accessTTL = defaultStreamAccessTTL
	}
	if h.log.GetSink() == nil {
		h.log = logr.Discard()
	}
	h.guests, h.writer, h.server, h.channelKinds = o.Guests, o.Client, o.Server, o.Channels
	h.channelLinks = o.ChannelLinks
	h.answerWait, h.webURL, h.openAIMaxWaits = o.OpenAIAnswerWait, o.WebURL, o.OpenAIMaxWaits
	if h.openAIMaxWaits <= 0 {
		h.openAIMaxWaits = defaultOpenAIMaxWaits
	}
	h.openAIWaits = semaphore.NewWeighted(int64(h.openAIMaxWaits))
	if o.Doctor != nil {
		h.doctor = &doctorRuns{run: o.Doctor}
	}
	h.mux = http.NewServeMux()
	for _, rt := range h.routes() {
		h.mux.Handle(wire.Prefix+rt.pattern, h.route(rt.methods))
	}
	h.mux.Handle(wire.Prefix, h.route(nil))
	return h, nil
}

// route is a path of the Dots API (under wire.Prefix) and its methods.
type route struct {
	pattern string
	methods map[string]handlerFunc
}

// routes is every route of the Dots API; docs/api.md documents each (a
// test keeps it so).
func (h *Handler) routes() []route {
	return []route{
		{"namespaces/{ns}/dots/{name}/messages", map[string]handlerFunc{http.MethodPost: h.postMessage, http.MethodGet: h.getMessages}},
		{"namespaces/{ns}/dots/{name}/events", map[string]handlerFunc{http.MethodGet: h.getEvents}},
		{"namespaces/{ns}/dots/{name}/activity", map[string]handlerFunc{http.MethodGet: h.getActivity}},
		{"namespaces/{ns}/dots/{name}/stream", map[string]handlerFunc{http.MethodGet: h.streamDot}},
		{"stream", map[string]handlerFunc{http.MethodGet: h.streamAll}},
		{"tasks", map[string]handlerFunc{http.MethodGet: h.listEndedTasks}},
		{"namespaces/{ns}/tasks", map[string]handlerFunc{http.MethodGet: h.listEndedTasks}},
		{"hostagent/hosts/{host}/outbox", map[string]handlerFunc{http.MethodGet: h.waitOutbox}},
		{"hostagent/hosts/{host}/dots/{ns}/{name}/events", map[string]handlerFunc{http.MethodPost: h.ingestEvents}},
		{"hostagent/hosts/{host}/dots/{ns}/{name}/outbox", map[string]handlerFunc{http.MethodGet: h.getOutbox}},
		{"hostagent/hosts/{host}/dots/{ns}/{name}/outbox/{id}/ack", map[string]handlerFunc{http.MethodPost: h.ackOutbox}},
		{"namespaces/{ns}/dots/{name}/files/list", map[string]handlerFunc{http.MethodGet: h.listFiles}},
		{"namespaces/{ns}/dots/{name}/files", map[string]handlerFunc{http.MethodGet: h.readFile}},
		{"namespaces/{ns}/dots/{name}/screenshot", map[string]handlerFunc{http.MethodGet: h.screenshot}},
		{"namespaces/{ns}/dots/{name}/tools", map[string]handlerFunc{http.MethodGet: h.tools}},
		{"namespaces/{ns}/dots/{name}/skills", map[string]handlerFunc{http.MethodGet: h.skills}},
		{"namespaces/{ns}/dots/{name}/browser-identities", map[string]handlerFunc{http.MethodGet: h.listBrowserIdentities, http.MethodPost: h.createBrowserIdentity}},
		{"namespaces/{ns}/dots/{name}/browser-identities/{identity}", map[string]handlerFunc{http.MethodGet: h.getBrowserIdentity, http.MethodDelete: h.deleteBrowserIdentity}},
		{"namespaces/{ns}/dots/{name}/browser-identities/{identity}/frame", map[string]handlerFunc{http.MethodGet: h.browserFrame}},
		{"namespaces/{ns}/dots/{name}/browser-identities/{identity}/close", map[string]handlerFunc{http.MethodPost: h.closeBrowserIdentity}},
		{"namespaces/{ns}/dots/{name}/mcp-secrets", map[string]handlerFunc{http.MethodGet: h.getMCPSecrets}},
		{"namespaces/{ns}/dots/{name}/mcp-secrets/{server}/{secret}", map[string]handlerFunc{http.MethodPut: h.putMCPSecret, http.MethodDelete: h.deleteMCPSecret}},
		{"namespaces/{ns}/dots/{name}/usage", map[string]handlerFunc{http.MethodGet: h.usage}},
		{"namespaces/{ns}/dots/{name}/computer/" + wire.PowerStart, map[string]handlerFunc{http.MethodPost: h.powerComputer(wire.PowerStart)}},
		{"namespaces/{ns}/dots/{name}/computer/" + wire.PowerStop, map[string]handlerFunc{http.MethodPost: h.powerComputer(wire.PowerStop)}},
		{"namespaces/{ns}/dots/{name}/computer/" + wire.PowerReboot, map[string]handlerFunc{http.MethodPost: h.powerComputer(wire.PowerReboot)}},
		{"namespaces/{ns}/dots/{name}/channels", map[string]handlerFunc{http.MethodGet: h.listChannelKinds, http.MethodPost: h.addChannel}},
		{"namespaces/{ns}/dots/{name}/channels/{channel}/credentials", map[string]handlerFunc{http.MethodPut: h.putChannelCredentials}},
		{"namespaces/{ns}/dots/{name}/channels/{channel}/pairing-codes", map[string]handlerFunc{http.MethodPost: h.addPairingCode}},
		{"namespaces/{ns}/dots/{name}/channels/{channel}/link", map[string]handlerFunc{http.MethodGet: h.linkChannel}},
		{"namespaces/{ns}/dots/{name}/channels/{channel}/people/{id}", map[string]handlerFunc{http.MethodDelete: h.unpairPerson}},
		{"health", map[string]handlerFunc{http.MethodGet: h.health}},
		{"doctor", map[string]handlerFunc{http.MethodGet: h.runDoctor}},
		{"secrets/openrouter", map[string]handlerFunc{http.MethodPut: h.putOpenRouterKey}},
		{"namespaces/{ns}/dots/{name}/secrets/openrouter", map[string]handlerFunc{http.MethodPut: h.putDotOpenRouterKey}},
		{"namespaces/{ns}/approvals/{approval}/approve", map[string]handlerFunc{http.MethodPost: h.answerApproval(dotsv1.Approve)}},
		{"namespaces/{ns}/approvals/{approval}/reject", map[string]handlerFunc{http.MethodPost: h.answerApproval(dotsv1.Reject)}},
		{"namespaces/{ns}/webhooks/{webhook}/secret", map[string]handlerFunc{http.MethodPost: h.newWebhookSecret}},
	}
}

// Routes lists every route as "METHOD /dots/v1/PATTERN", sorted.
func Routes() []string { return routeList(wire.Prefix, (&Handler{}).routes()) }

// routeList is "METHOD PREFIXPATTERN" of each method of each route, sorted.
func routeList(prefix string, routes []route) []string {
	var out []string
	for _, rt := range routes {
		for m := range rt.methods {
			out = append(out, m+" "+prefix+rt.pattern)
		}
	}
	slices.Sort(out)
	return out
}

// ServeHTTP serves one request of the Dots API.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	h.mux.ServeHTTP(w, r)
}

// handlerFunc answers a request: it writes a success itself and returns an
// error for everything else, which route writes as the JSON error.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

// route dispatches on the method; a nil map is the routes' catch-all.
func (h *Handler) route(methods map[string]handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var err error
		if methods == nil {
			err = apiErrorf(http.StatusNotFound, wire.CodeNotFound, "the Dots API has no route %s", r.URL.Path)
		} else if err = readableQuery(r); err != nil {
		} else if fn, ok := methods[r.Method]; ok {
			err = fn(w, r)
		} else {
			allowed := make([]string, 0, len(methods))
			for m := range methods {
				allowed = append(allowed, m)
			}
			w.Header().Set("Allow", strings.Join(allowed, ", "))
			err = apiErrorf(http.StatusMethodNotAllowed, wire.CodeMethodNotAllowed, "%s does not take %s", r.URL.Path, r.Method)
		}
		if err != nil {
			h.writeError(w, r, err)
		}
	})
}

// readableQuery refuses a query string that cannot be read as it is: an
// escape that is not one, or a name or value holding a NUL or bytes that are
// not UTF-8 (no parameter of the API takes them, and the log's filters would
// carry them to PostgreSQL, which refuses them).
func readableQuery(r *http.Request) error {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return badRequest("the query string cannot be read (%v): escape its parameters' values as a URL's query", err)
	}
	for key, vals := range q {
		for _, v := range append([]string{key}, vals...) {
			if !utf8.ValidString(v) || strings.ContainsRune(v, 0) {
				return badRequest("the query parameter %q holds a NUL or bytes that are not UTF-8; no parameter takes them", pgtext.String(key))
			}
		}
	}
	return nil
}

// apiError is an answer other than success, with its status and code.
type apiError struct {
	status  int
	code    string
	message string
}

func (e *apiError) Error() string { return e.message }

func apiErrorf(status int, code, format string, args ...any) error {
	return &apiError{status: status, code: code, message: fmt.Sprintf(format, args...)}
}

func badRequest(format string, args ...any) error {
	return apiErrorf(http.StatusBadRequest, wire.CodeInvalidRequest, format, args...)
}

// writeError answers err. An error that is not an apiError is the server's
// own: the log gets it, the caller only that it happened (its text may name
// the database's internals); but for a request whose context ended: its
// caller went away or the server stops, and nothing failed.
func (h *Handler) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var ae *apiError
	switch {
	case errors.As(err, &ae):
		h.log.V(1).Info("a Dots API request was refused", "method", r.Method, "path", r.URL.Path, "status", ae.status, "code", ae.code)
	case errors.Is(err, context.Canceled) && r.Context().Err() != nil:
		// The caller went away or the server stops (a host agent's long
		// poll of its outbox, at every stop): nothing failed.
		h.log.V(1).Info("a Dots API request ended before its answer", "method", r.Method, "path", r.URL.Path)
		ae = &apiError{status: http.StatusServiceUnavailable, code: wire.CodeUnavailable, message: "the request ended before its answer (the caller went away or the server stops); try again"}
	default:
		h.log.Error(err, "a Dots API request failed", "method", r.Method, "path", r.URL.Path)
		ae = &apiError{status: http.StatusInternalServerError, code: wire.CodeInternal, message: "the server failed to answer; its log says why"}
	}
	writeJSON(w, ae.status, wire.NewError(ae.status, ae.code, ae.message))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// decode reads r's body, at most limit bytes of one JSON value, into v: an
// unknown field, a second value or anything after it is refused.
func decode(w http.ResponseWriter, r *http.Request, limit int64, v any) error {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || mt != "application/json" {
			return apiErrorf(http.StatusUnsupportedMediaType, wire.CodeUnsupportedMediaType, "the body must be application/json, not %q (with curl: -H 'Content-Type: application/json')", ct)
		}
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	dec.DisallowUnknownFields()
	tooLarge := func(err error) bool {
		var mbe *http.MaxBytesError
		return errors.As(err, &mbe)
	}
	if err := dec.Decode(v); err != nil {
		switch {
		case tooLarge(err):
			return apiErrorf(http.StatusRequestEntityTooLarge, wire.CodeTooLarge, "the body is larger than %d bytes", limit)
		case errors.Is(err, io.EOF):
			return badRequest("the body is empty; it must be a JSON object")
		}
		return badRequest("the body is not what %s takes: %s", r.URL.Path, strings.TrimPrefix(err.Error(), "json: "))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		if tooLarge(err) {
			return apiErrorf(http.StatusRequestEntityTooLarge, wire.CodeTooLarge, "the body is larger than %d bytes", limit)
		}
		return badRequest("the body has data after its JSON object")
	}
	return nil
}

// pathValues reads and checks the path's names.
func pathValues(r *http.Request, names ...string) ([]string, error) {
	out := make([]string, len(names))
	for i, n := range names {
		v := r.PathValue(n)
		var problems []string
		switch n {
		case "ns":
			problems = validation.IsDNS1123Label(v)
		case "name", "host", "approval", "webhook":
			problems = validation.IsDNS1123Subdomain(v)
		case "id":
			if v == "" || len(v) > 253 || strings.ContainsAny(v, "/\x00") {
				problems = []string{"must be an outbox row id"}
			}
		}
		if len(problems) > 0 {
			return nil, badRequest("%s %q in the path is not valid: %s", pathNames[n], v, strings.Join(problems, "; "))
		}
		out[i] = v
	}
	return out, nil
}

var pathNames = map[string]string{"ns": "the namespace", "name": "the Dot's name", "host": "the host", "id": "the outbox row id", "approval": "the Approval's name", "webhook": "the Webhook's name"}

func callerOf(r *http.Request) (user.Info, error) {
	u, ok := request.UserFrom(r.Context())
	if !ok || u == nil {
		return nil, apiErrorf(http.StatusForbidden, wire.CodeForbidden, "the request carries no authenticated user")
	}
	return u, nil
}

// authorizeDot asks the API server's authorizer whether the caller may verb
// the subresource of the Dot namespace/name, as RBAC would for a resource
// request: nonResourceURLs let the path through for every namespace at once.
func (h *Handler) authorizeDot(r *http.Request, verb, subresource, namespace, name string) error {
	u, err := callerOf(r)
	if err != nil {
		return err
	}
	return h.authorize(r.Context(), authorizer.AttributesRecord{
		User: u, Verb: verb, Namespace: namespace, Name: name, ResourceRequest: true,
		APIGroup: dotsv1.GroupVersion.Group, APIVersion: dotsv1.GroupVersion.Version,
		Resource: "dots", Subresource: subresource,
	})
}

func (h *Handler) authorize(ctx context.Context, a authorizer.AttributesRecord) error {
	decision, reason, err := h.authz.Authorize(ctx, a)
	if decision == authorizer.DecisionAllow {
		return nil
	}
	if err != nil {
		h.log.V(1).Info("the authorizer failed", "user", a.User.GetName(), "verb", a.Verb, "resource", a.Resource, "err", err.Error())
	}
	what := a.Resource
	if a.Subresource != "" {
		what += "/" + a.Subresource
	}
	where := a.Name
	if a.Namespace != "" {
		where = a.Namespace + "/" + a.Name
	}
	msg := fmt.Sprintf("user %q may not %s %s of %q", a.User.GetName(), a.Verb, what, where)
	if reason != "" {
		msg += ": " + reason
	}
	return apiErrorf(http.StatusForbidden, wire.CodeForbidden, "%s", msg)
}

// getDot reads the Dot namespace/name: 404 when there is none.
// dotOf is the Dot a people's route names ({ns}/{name}), once the caller
// may act on it (verb on its subresource).
func (h *Handler) dotOf(r *http.Request, verb, subresource string) (*dotsv1.Dot, error) {
	p, err := pathValues(r, "ns", "name")
	if err != nil {
		return nil, err
	}
	if err := h.authorizeDot(r, verb, subresource, p[0], p[1]); err != nil {
		return nil, err
	}
	return h.getDot(r.Context(), p[0], p[1])
}

// pageParam reads one of the paging parameters every read of the log takes
// (limit from 1 to max, order, before) into q, and says whether key was one.
func pageParam(key, v string, max int, q *page) (bool, error) {
	switch key {
	case "limit":
		n, err := strconv.Atoi(v)
		switch {
		case err != nil || n < 1:
			return true, badRequest("limit %q is not a whole number from 1 to %d", v, max)
		case n > max:
			return true, badRequest("limit %d is above %d, the most a page holds", n, max)
		}
		q.limit = n
	case "order":
		if v != wire.OrderAsc && v != wire.OrderDesc {
			return true, badRequest("order %q is neither %s nor %s", v, wire.OrderAsc, wire.OrderDesc)
		}
		q.order = v
	case "before":
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			return true, badRequest("before %q is not an event id", v)
		}
		q.before = n
	default:
		return false, nil
	}
	return true, nil
}

// page is where a read of the log starts and how much it reads.
type page struct {
	limit  int
	order  string
	before int64
}

// check refuses a before without order=desc.
func (q page) check() error {
	if q.before != 0 && q.order != wire.OrderDesc {
		return badRequest("before goes on from a page read newest first: it needs order=desc")
	}
	return nil
}

func (h *Handler) getDot(ctx context.Context, namespace, name string) (*dotsv1.Dot, error) {
	d := &dotsv1.Dot{}
	if err := h.dots.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, d); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, apiErrorf(http.StatusNotFound, wire.CodeNotFound, "there is no Dot %s in namespace %s", name, namespace)
		}
		return nil, fmt.Errorf("read the Dot %s/%s: %w", namespace, name, err)
	}
	return d, nil
}

func storeDot(d *dotsv1.Dot) store.Dot {
	return store.Dot{Namespace: d.Namespace, Name: d.Name, UID: string(d.UID)}
}
