// Package hooks is the webhook listener: POST /hooks/v1/{namespace}/{name}
// turns a signed delivery into one Task for the Webhook's Dot.
//
// A delivery goes through these steps, in order:
//  1. its body is read, at most MaxBody bytes;
//  2. its Webhook is found (not paused) and its secret read;
//  3. its signature is checked in constant time (the Webhook's scheme,
//     verify.go), before the body is parsed;
//  4. its delivery id is taken (the scheme's header, else a hash of the
//     body): the Task's name is derived from it, so a sender's retry finds
//     the Task the first try made instead of making a second;
//  5. the Webhook's rate limit is asked;
//  6. the body is parsed and the description rendered (template.go), the
//     sender's values marked as untrusted;
//  7. the Task is made, and the answer is 202 {"task": name} at once.
//
// GitHub's ping (X-GitHub-Event: ping, sent when a webhook is added there),
// well signed, is answered 200 {"pong": true} and makes no Task.
//
// A refusal at steps 1 to 4 is one answer, whatever its reason: 401 with
// the same body for an unknown Webhook, a paused one, a bad signature, a
// timestamp out of the replay window and a body over MaxBody alike, so the
// listener says nothing of which Webhooks exist to whoever cannot sign for
// one. An unknown Webhook's body is hashed with a stand-in secret, so the
// time taken does not tell either. The reason goes to the Webhook's status
// (lastError), for its owner. A sender who signed well may read more: 429
// over the rate limit, 500 when the Task could not be made.
//
// The listener runs in every server that runs the central controllers,
// leading or not (a Task's name is the same whichever server makes it), on
// the address INVISIBLE_DOTS_HOOKS_LISTEN names; it is off without it. It
// speaks plain HTTP: a reverse proxy or a tunnel in front of it adds TLS.
package hooks

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
)

// EnvListen is the listener's address (host:port); unset, there is none.
const EnvListen = "INVISIBLE_DOTS_HOOKS_LISTEN"

// EnvURL is the listener's public base URL, as senders reach it (through a
// reverse proxy or a tunnel), for the URLs the command line prints.
const EnvURL = "INVISIBLE_DOTS_HOOKS_URL"

// PathPrefix begins every Webhook's path: PathPrefix + namespace/name.
const PathPrefix = "/hooks/v1/"

// MaxBody is the largest body a delivery may have (GitHub's own bound is
// 25 MB, but its events are a few KiB; a payload of a MiB is never a task).
const MaxBody = 1 << 20

// Rate limits per Webhook, unless Options say otherwise: a sustained 20
// deliveries a second, bursts of 100.
const (
	DefaultRate  = 20
	DefaultBurst = 100
)

// secretFresh is how long a Webhook's secret is used as read, unless its
// Webhook's WebhookSecretRotatedAnnotation changes meanwhile (a rotation:
// read again at once); a delivery that fails with an older copy reads it
// again, at most once per secretRetry.
const (
	secretFresh = 10 * time.Second
	secretRetry = time.Second
)

// refusal is the one answer to a delivery refused before it proved itself.
const refusal = `{"error":"unauthorized"}` + "\n"

// TaskAnnotation holds, on a Task a Webhook made, the delivery's id (cut to
// 200 characters).
const TaskAnnotation = "dots.invisible.dev/webhook-delivery"

// What the listener reads and writes, in the central controllers' role.
// +kubebuilder:rbac:groups=dots.invisible.dev,resources=webhooks,verbs=get;list;watch
// +kubebuilder:rbac:groups=dots.invisible.dev,resources=webhooks/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=dots.invisible.dev,resources=tasks,verbs=get;create
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get

// Options are what the listener needs.
type Options struct {
	// Address is host:port to listen on.
	Address string
	// Reader reads Webhooks (the manager's cache).
	Reader client.Reader
	// SecretReader reads the Webhooks' Secrets (from the API server: the
	// manager caches no Secret).
	SecretReader client.Reader
	// Client makes Tasks and writes the Webhooks' status.
	Client client.Client
	// Log says what the listener does, never a secret or a body.
	Log logr.Logger
	// Clock is time for the replay window and the status; the real clock
	// when nil. Used for testing purposes.
	Clock clock.PassiveClock
	// Rate and Burst are each Webhook's rate limit (deliveries a second);
	// DefaultRate and DefaultBurst when zero.
	Rate  rate.Limit
	Burst int
	// FlushEvery is how often the status is written; a second when zero.
	FlushEvery time.Duration
}

// Listener serves the Webhooks. Start it with Start (a manager.Runnable),
// or mount Handler on a server of one's own.
type Listener struct {
	o      Options
	status *statusBatch

	mu       sync.Mutex
	limiters map[types.UID]*rate.Limiter
	secrets  map[types.NamespacedName]cachedSecret

	// standIn is the secret an unknown Webhook's delivery is checked
	// against, so it takes the time a known one does.
	standIn []byte
}

type cachedSecret struct {
	value []byte
	read  time.Time
	// rotated is the Webhook's WebhookSecretRotatedAnnotation when read.
	rotated string
}

// New makes a Listener.
func New(o Options) *Listener {
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Rate == 0 {
		o.Rate = DefaultRate
	}
	if o.Burst == 0 {
		o.Burst = DefaultBurst
	}
	if o.FlushEvery == 0 {
		o.FlushEvery = time.Second
	}
	l := &Listener{
		o:        o,
		limiters: map[types.UID]*rate.Limiter{},
		secrets:  map[types.NamespacedName]cachedSecret{},
		standIn:  []byte("not-a-secret-of-any-webhook-xxxxxxxxxxxxxxxxxxxxxxxx"),
	}
	l.status = newStatusBatch(o.Client, o.Reader, o.Clock, o.Log)
	return l
}

// NeedLeaderElection is false: every server listens (see the package doc).
func (l *Listener) NeedLeaderElection() bool { return false }

// Start listens on Options.Address until ctx ends (Serve).
func (l *Listener) Start(ctx context.Context) error {
	ln, err := net.Listen("tcp", l.o.Address)
	if err != nil {
		return fmt.Errorf("webhooks: listen on %s (%s): %w", l.o.Address, EnvListen, err)
	}
	return l.Serve(ctx, ln)
}

// Serve serves deliveries on ln until ctx ends, then stops taking them,
// lets those under way end (5 s at most) and writes the status they left.
func (l *Listener) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           l.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       90 * time.Second,
		MaxHeaderBytes:    64 << 10,
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	l.o.Log.Info("webhooks listener ready", "address", ln.Addr().String(), "path", PathPrefix+"{namespace}/{name}")
	flushed := make(chan struct{})
	go func() {
		defer close(flushed)
		l.status.run(ctx, l.o.FlushEvery, l.pruneLimiters)
	}()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("webhooks: serve: %w", err)
	case <-ctx.Done():
	}
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(stopCtx)
	<-flushed
	l.status.flush(stopCtx)
	return nil
}

// Handler is the listener's HTTP handler.
func (l *Listener) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+PathPrefix+"{namespace}/{name}", l.deliver)
	return mux
}

// Accepted is the answer to a delivery taken: the Task it made, or the one
// an earlier try of the same delivery made (Duplicate).
type Accepted struct {
	Task      string `json:"task"`
	Namespace string `json:"namespace"`
	Duplicate bool   `json:"duplicate,omitempty"`
}

func (l *Listener) deliver(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	key := types.NamespacedName{Namespace: r.PathValue("namespace"), Name: r.PathValue("name")}
	body, readErr := io.ReadAll(io.LimitReader(r.Body, MaxBody+1))
	if readErr == nil && len(body) > MaxBody {
		readErr = errTooLarge
	}

	wh, secret, found := l.find(ctx, key)
	if !found {
		// The time a known Webhook's check takes, and the same answer.
		_, _ = verifyGitHub(l.standIn, r.Header, body, time.Time{})
		refuse(w)
		return
	}
	if readErr != nil {
		l.refused(wh, readErr)
		refuse(w)
		return
	}
	now := l.o.Clock.Now()
	verify := verifiers[wh.Spec.Signature]
	id, err := verify(secret, r.Header, body, now)
	if errors.Is(err, errBadSignature) {
		// A rotated secret: read it again, once a second at most.
		if fresh, ok := l.reread(ctx, wh); ok {
			id, err = verify(fresh, r.Header, body, now)
		}
	}
	if err != nil {
		l.refused(wh, err)
		refuse(w)
		return
	}

	if wh.Spec.Signature == dotsv1.WebhookGitHub && r.Header.Get("X-GitHub-Event") == "ping" {
		// GitHub's ping, sent when the webhook is added there: it proves
		// the secret and the URL, and is no work for the Dot.
		writeJSON(w, http.StatusOK, map[string]bool{"pong": true})
		return
	}
	if !l.limiter(wh).AllowN(now, 1) {
		l.refused(wh, errors.New("over the rate limit"))
		w.Header().Set("Retry-After", "1")
		writeJSON(w, http.StatusTooManyRequests, map[string]string{"error": "rate limited"})
		return
	}

	task := l.task(wh, id, ParsePayload(r.Header.Get("Content-Type"), body))
	dup := false
	if err := l.o.Client.Create(ctx, task); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			reason := apiReason(err)
			l.refused(wh, fmt.Errorf("the Task could not be made: %s", reason))
			// The reason alone: the API's message may quote the sender's
			// text.
			l.o.Log.Info("webhook: the Task could not be made", "webhook", key.String(), "task", task.Name, "reason", reason)
			writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "the task could not be made"})
			return
		}
		dup = true
	}
	l.status.accepted(wh, task.Name, dup, now)
	writeJSON(w, http.StatusAccepted, Accepted{Task: task.Name, Namespace: task.Namespace, Duplicate: dup})
}

// find is the Webhook of key and its secret, when it exists, is not paused
// and its secret can be read; a missing secret is recorded in its status.
func (l *Listener) find(ctx context.Context, key types.NamespacedName) (*dotsv1.Webhook, []byte, bool) {
	if key.Namespace == "" || key.Name == "" || len(key.Namespace) > 63 || len(key.Name) > 40 {
		return nil, nil, false
	}
	wh := &dotsv1.Webhook{}
	if err := l.o.Reader.Get(ctx, key, wh); err != nil {
		if !apierrors.IsNotFound(err) {
			l.o.Log.Error(err, "webhook: read", "webhook", key.String())
		}
		return nil, nil, false
	}
	if wh.Spec.Paused || !wh.DeletionTimestamp.IsZero() {
		l.refused(wh, errors.New("the Webhook is paused"))
		return nil, nil, false
	}
	if _, ok := verifiers[wh.Spec.Signature]; !ok {
		return nil, nil, false
	}
	secret, err := l.secret(ctx, wh, false)
	if err != nil {
		l.refused(wh, err)
		return nil, nil, false
	}
	return wh, secret, true
}

// secret is the Webhook's secret, read again when older than secretFresh
// (or when again is set, older than secretRetry).
func (l *Listener) secret(ctx context.Context, wh *dotsv1.Webhook, again bool) ([]byte, error) {
	key := types.NamespacedName{Namespace: wh.Namespace, Name: wh.Spec.SecretRef.Name}
	now := l.o.Clock.Now()
	l.mu.Lock()
	c, ok := l.secrets[key]
	l.mu.Unlock()
	maxAge := secretFresh
	if again {
		maxAge = secretRetry
	}
	rotated := wh.Annotations[dotsv1.WebhookSecretRotatedAnnotation]
	if ok && now.Sub(c.read) < maxAge && c.rotated == rotated {
		return c.value, nil
	}
	sec := &corev1.Secret{}
	if err := l.o.SecretReader.Get(ctx, key, sec); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("its Secret %s is missing", key.Name)
		}
		return nil, fmt.Errorf("its Secret %s could not be read: %s", key.Name, apiReason(err))
	}
	v := sec.Data[wh.Spec.SecretRef.SecretKey()]
	if len(v) == 0 {
		return nil, fmt.Errorf("its Secret %s holds no %q", key.Name, wh.Spec.SecretRef.SecretKey())
	}
	l.mu.Lock()
	l.secrets[key] = cachedSecret{value: v, read: now, rotated: rotated}
	l.mu.Unlock()
	return v, nil
}

// reread is the secret read again, when the copy held was not just read.
func (l *Listener) reread(ctx context.Context, wh *dotsv1.Webhook) ([]byte, bool) {
	key := types.NamespacedName{Namespace: wh.Namespace, Name: wh.Spec.SecretRef.Name}
	l.mu.Lock()
	c, ok := l.secrets[key]
	l.mu.Unlock()
	if ok && l.o.Clock.Since(c.read) < secretRetry {
		return nil, false
	}
	v, err := l.secret(ctx, wh, true)
	if err != nil || (ok && string(v) == string(c.value)) {
		return nil, false
	}
	return v, true
}

// limiter is the Webhook's rate limiter (one per UID: a Webhook made again
// under its name starts afresh).
func (l *Listener) limiter(wh *dotsv1.Webhook) *rate.Limiter {
	l.mu.Lock()
	defer l.mu.Unlock()
	lim, ok := l.limiters[wh.UID]
	if !ok {
		lim = rate.NewLimiter(l.o.Rate, l.o.Burst)
		l.limiters[wh.UID] = lim
	}
	return lim
}

// pruneLimiters forgets the limiters that are full (idle long enough to
// have every token back): one made again is the same, and a Webhook gone
// leaves nothing behind.
func (l *Listener) pruneLimiters() {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.o.Clock.Now()
	for uid, lim := range l.limiters {
		if lim.TokensAt(now) >= float64(lim.Burst()) {
			delete(l.limiters, uid)
		}
	}
}

// TaskName is the name of the Task the delivery id makes through the
// Webhook: the Webhook's name and 10 hex digits of a hash of its UID and
// the id, so a retry of the delivery names the same Task, and the same id
// sent to another Webhook (or to this one made again) another.
func TaskName(wh *dotsv1.Webhook, deliveryID string) string {
	sum := sha256.Sum256([]byte(string(wh.UID) + "\x00" + deliveryID))
	return wh.Name + "-" + hex.EncodeToString(sum[:])[:10]
}

// task is the Task a delivery makes.
func (l *Listener) task(wh *dotsv1.Webhook, id string, p Payload) *dotsv1.Task {
	return &dotsv1.Task{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:       wh.Namespace,
			Name:            TaskName(wh, id),
			Labels:          map[string]string{dotsv1.WebhookLabel: wh.Name},
			Annotations:     map[string]string{TaskAnnotation: clean(id)},
			OwnerReferences: dotOwner(wh),
		},
		Spec: dotsv1.TaskSpec{
			DotName:     wh.Spec.DotName,
			Description: Render(wh.Spec.Task.Description, wh.Namespace+"/"+wh.Name, p),
			Priority:    wh.Spec.Task.Priority,
		},
	}
}

// dotOwner is the Task's owner reference to its Dot, taken from the
// Webhook's own (the Webhook controller makes the Dot its controller): the
// Task is made bound, and the Task controller has no owner to patch in,
// one write fewer a delivery. A Webhook not bound yet gives none; the Task
// controller binds the Task then.
func dotOwner(wh *dotsv1.Webhook) []metav1.OwnerReference {
	ref := metav1.GetControllerOfNoCopy(wh)
	if ref == nil || ref.Kind != "Dot" || ref.Name != wh.Spec.DotName {
		return nil
	}
	if gv, err := schema.ParseGroupVersion(ref.APIVersion); err != nil || gv.Group != dotsv1.GroupVersion.Group {
		return nil
	}
	return []metav1.OwnerReference{*ref}
}

// refused counts a refusal on the Webhook's status.
func (l *Listener) refused(wh *dotsv1.Webhook, why error) {
	l.status.refused(wh, why.Error(), l.o.Clock.Now())
}

// apiReason is an API error's reason alone (its message may quote what
// was sent).
func apiReason(err error) string {
	if r := apierrors.ReasonForError(err); r != metav1.StatusReasonUnknown {
		return string(r)
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return "the API server could not be reached"
	}
	return "an error"
}

func refuse(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusUnauthorized)
	_, _ = io.WriteString(w, refusal)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// URL is the URL of the Webhook namespace/name under base (EnvURL, else
// http:// and the listen address).
func URL(base, namespace, name string) string {
	return strings.TrimSuffix(base, "/") + PathPrefix + namespace + "/" + name
}
