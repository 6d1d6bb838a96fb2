package dotsapi

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/hostagent/guestclient"
	"github.com/invisible-dots/invisible-dots/hostagent/guestproxy"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
)

// The subresources people read a Dot's guest with: dots-editor and
// dots-viewer both get them.
const (
	filesSubresource      = "files"
	screenshotSubresource = "screenshot"
	toolsSubresource      = "tools"
	skillsSubresource     = "skills"
)

// guestCallTimeout bounds one request to a guest, its answer read whole
// included: a file of 16 MiB over the loopback takes well under it.
const guestCallTimeout = 30 * time.Second

// dotGuest is the guest of a Dot a route reads: the Computer it runs in,
// and the host that runs it.
type dotGuest struct {
	dot      *dotsv1.Dot
	computer types.NamespacedName
	host     string
}

// guestFor is the start of every route that asks a Dot's guest: the Dot
// named by the path, the caller's right to verb its subresource, no query
// (these routes take none), and the guest (guestOf).
func (h *Handler) guestFor(r *http.Request, verb, subresource string) (dotGuest, error) {
	p, err := pathValues(r, "ns", "name")
	if err != nil {
		return dotGuest{}, err
	}
	ns, name := p[0], p[1]
	if err := h.authorizeDot(r, verb, subresource, ns, name); err != nil {
		return dotGuest{}, err
	}
	if len(r.URL.Query()) > 0 {
		return dotGuest{}, badRequest("%s takes no query parameters", r.URL.Path)
	}
	return h.guestOf(r.Context(), ns, name)
}

// guestOf reads the Dot and its Computer and says why its guest cannot be
// asked: 409 computer_stopped when the computer does not run (whoever's
// host it is on: the API server knows). Only the agent of the Computer's
// own host may talk to its guest (DESIGN.md 2): the request goes through
// that agent's endpoint, and a host whose agent cannot be reached is a 502
// host_unreachable naming it (guestCall).
func (h *Handler) guestOf(ctx context.Context, ns, name string) (dotGuest, error) {
	d, err := h.getDot(ctx, ns, name)
	if err != nil {
		return dotGuest{}, err
	}
	c := &dotsv1.Computer{}
	if err := h.dots.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, c); err != nil {
		if apierrors.IsNotFound(err) {
			return dotGuest{}, apiErrorf(http.StatusConflict, wire.CodeComputerStopped, "the Dot %s/%s has no computer yet", ns, name)
		}
		return dotGuest{}, fmt.Errorf("read the Computer %s/%s: %w", ns, name, err)
	}
	if !metav1.IsControlledBy(c, d) {
		return dotGuest{}, apiErrorf(http.StatusConflict, wire.CodeComputerStopped, "the Computer %s/%s is not the Dot's (another owns it), so the Dot has no computer", ns, name)
	}
	if c.Status.State != dotsv1.ComputerRunning {
		state := string(c.Status.State)
		if state == "" {
			state = "not reported yet"
		}
		msg := fmt.Sprintf("the computer of Dot %s/%s is not running (its state is %s)", ns, name, state)
		if c.Status.StopReason != "" {
			msg += fmt.Sprintf(", stopped for %s", c.Status.StopReason)
		}
		return dotGuest{}, apiErrorf(http.StatusConflict, wire.CodeComputerStopped, "%s: start it with `invisible-dots computer start %s -n %s`", msg, name, ns)
	}
	return dotGuest{dot: d, computer: types.NamespacedName{Namespace: ns, Name: name}, host: c.Spec.NodeName}, nil
}

// guestGet asks dot-agentd of the guest for pathAndQuery and returns its
// answer when it is a 200; any other answer is the guest's refusal, passed
// through (guestRefusal). The caller closes the body and cancels.
func (h *Handler) guestGet(ctx context.Context, g dotGuest, pathAndQuery string) (*http.Response, context.CancelFunc, error) {
	return h.guestCall(ctx, g, guestRequest{method: http.MethodGet, path: pathAndQuery, want: http.StatusOK})
}

// guestRequest is one request to a guest and the status that is its
// success.
type guestRequest struct {
	method, path string
	// body is sent as application/json when not nil.
	body []byte
	want int
	// timeout bounds the request, guestCallTimeout when 0.
	timeout time.Duration
	// secret is a secret the body carries (a browser identity's proxy):
	// masked as *** in a refusal's words, should a guest repeat it.
	secret string
}

// guestCall sends q to dot-agentd of the guest and returns its answer when
// its status is q.want; any other answer is the guest's refusal, passed
// through (guestRefusal). The caller closes the body and cancels.
func (h *Handler) guestCall(ctx context.Context, g dotGuest, q guestRequest) (*http.Response, context.CancelFunc, error) {
	timeout := cmp.Or(q.timeout, guestCallTimeout)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	var body io.Reader
	var header http.Header
	if q.body != nil {
		body, header = bytes.NewReader(q.body), http.Header{"Content-Type": {"application/json"}}
	}
	if h.guests == nil {
		cancel()
		return nil, nil, apiErrorf(http.StatusBadGateway, wire.CodeHostUnreachable, "this server reaches no host agent, so the guest of Dot %s cannot be asked", g.computer)
	}
	resp, err := h.guests.Do(ctx, g.host, g.computer, q.method, q.path, body, header)
	if err != nil {
		cancel()
		return nil, nil, h.unreachable(g, q.method, q.path, timeout, err)
	}
	if resp.StatusCode != q.want {
		defer cancel()
		defer resp.Body.Close()
		return nil, nil, guestRefusal(resp, q.secret)
	}
	return resp, cancel, nil
}

// unreachable words a request that reached no answer of the guest: by what
// happened, never the guest's text.
func (h *Handler) unreachable(g dotGuest, method, pathAndQuery string, timeout time.Duration, err error) error {
	what := g.computer.String()
	route, _, _ := strings.Cut(pathAndQuery, "?")
	var msg string
	var hostErr *HostUnreachableError
	switch {
	case errors.As(err, &hostErr):
		// What failed (a missing Host, no endpoint, a connection refused),
		// in the host client's words, which hold no token.
		return apiErrorf(http.StatusBadGateway, wire.CodeHostUnreachable, "the computer of Dot %s runs on host %s, whose agent cannot be reached: %s",
			what, hostErr.Host, hostErr.Why)
	case errors.Is(err, guestproxy.ErrNoGuest):
		msg = fmt.Sprintf("the computer of Dot %s runs and its guest cannot be reached yet (it may still be starting): try again shortly", what)
	case errors.Is(err, guestclient.ErrGuestUnproven):
		msg = fmt.Sprintf("the listener on the guest port of Dot %s did not prove it is the Dot's guest, so it was sent nothing", what)
	case errors.Is(err, guestclient.ErrGuestNotAnswering):
		msg = fmt.Sprintf("the guest of Dot %s is not answering yet (it may still be starting)", what)
	case errors.Is(err, context.DeadlineExceeded):
		msg = fmt.Sprintf("the guest of Dot %s did not answer %s %s within %s", what, method, route, timeout)
	default:
		msg = fmt.Sprintf("the request %s %s to the guest of Dot %s did not complete", method, route, what)
		// The guest client's errors name the port and the route, never the
		// token or a body.
		h.log.V(1).Info("a guest request failed", "dot", what, "method", method, "route", route, "err", err.Error())
	}
	return apiErrorf(http.StatusServiceUnavailable, wire.CodeGuestUnavailable, "%s", msg)
}

// guestCodeRE is what an error code of the protocol looks like; a guest's
// answer with anything else in its place keeps its status, not its code.
var guestCodeRE = regexp.MustCompile(`^[a-z][a-z_]{0,39}$`)

// maxGuestMessage bounds the guest's own words passed on in a refusal.
const maxGuestMessage = 300

// guestRefusal passes a guest's refusal through with its code and status
// (ref 9.6: outside_home, not_found, is_a_directory, the engine's own). A
// 401 is the token the agent sent, not the caller's: it is the guest that
// could not be used. The guest's message is the Dot's own answer to a
// person who may read the Dot; it is clipped to printable text and never
// logged. A secret the request carried is masked in them as ***.
func guestRefusal(resp *http.Response, secret string) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	// A refusal that is not the protocol's ErrorResponse, exactly, keeps
	// its status and no code or words.
	var er protocol.ErrorResponse
	if protocol.DecodeBytes(body, &er) != nil {
		er = protocol.ErrorResponse{}
	}
	status := resp.StatusCode
	if status == http.StatusUnauthorized || status < 400 || status > 599 {
		return apiErrorf(http.StatusServiceUnavailable, wire.CodeGuestUnavailable, "the guest answered %d: it could not be used", status)
	}
	code := er.Error
	if !guestCodeRE.MatchString(code) {
		code = wire.CodeGuestError
	}
	msg := fmt.Sprintf("the guest answered %d %s", status, code)
	if strings.TrimSpace(secret) != "" {
		er.Message = strings.ReplaceAll(er.Message, secret, "***")
	}
	if m := printable(er.Message, maxGuestMessage); m != "" {
		msg += ": " + m
	}
	return apiErrorf(status, code, "%s", msg)
}

// printable keeps the printable ASCII of s, at most n bytes of it.
func printable(s string, n int) string {
	var b strings.Builder
	for _, r := range s {
		if b.Len() >= n {
			b.WriteString("...")
			break
		}
		if r >= 0x20 && r < 0x7f {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// readAnswer reads a guest's whole answer, at most limit bytes; ok is false
// when it holds more, and reading stops there.
func readAnswer(resp *http.Response, limit int64) (data []byte, ok bool, err error) {
	if resp.ContentLength > limit {
		return nil, false, nil
	}
	data, err = io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, false, err
	}
	if int64(len(data)) > limit {
		return nil, false, nil
	}
	return data, true, nil
}

// decodeAnswer reads a guest's JSON answer into v.
func decodeAnswer(resp *http.Response, route string, v any) error {
	data, ok, err := readAnswer(resp, wire.MaxGuestAnswer)
	if err != nil {
		return apiErrorf(http.StatusServiceUnavailable, wire.CodeGuestUnavailable, "the guest's answer to GET %s broke off", route)
	}
	if !ok {
		return apiErrorf(http.StatusBadGateway, wire.CodeGuestError, "the guest's answer to GET %s is larger than %d bytes", route, wire.MaxGuestAnswer)
	}
	// Read as strictly as the guest reads the host's bodies: a guest is
	// untrusted from here, and a shape the protocol does not have (a key in
	// another case, a field it does not know, a second value) is not
	// passed on as if it were.
	if err := protocol.DecodeBytes(data, v); err != nil {
		return apiErrorf(http.StatusBadGateway, wire.CodeGuestError, "the guest's answer to GET %s is not what the protocol says%s", route, answerProblem(err))
	}
	return nil
}

// answerProblem says in a few words what is wrong with a guest's answer,
// never quoting it (a key is the guest's text).
func answerProblem(err error) string {
	var de *protocol.DecodeError
	if !errors.As(err, &de) {
		return ""
	}
	switch de.Problem {
	case protocol.BodyUnknownField:
		return " (a field the protocol does not have, or a key in another case)"
	case protocol.BodyTrailing:
		return " (more than one JSON value)"
	}
	return ""
}

// dotRef names d on the wire.
func dotRef(d *dotsv1.Dot) wire.DotRef {
	return wire.DotRef{Namespace: d.Namespace, Name: d.Name, UID: string(d.UID)}
}
