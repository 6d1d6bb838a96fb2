package guestlink

import (
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/hostagent/crashpoint"
	"github.com/invisible-dots/invisible-dots/hostagent/guestclient"
)

// The READY procedure (ref 9.3) on one guest, and what this agent knows the
// guest holds.

// record is what one guest holds, as far as this agent pushed it.
type record struct {
	// port, pid and startTicks name the guest (its QEMU): another one
	// holds nothing.
	port, pid  int
	startTicks uint64
	// secrets is the digest of the secrets the guest took; keyPushed says
	// whether it took any.
	keyPushed bool
	secrets   [sha256.Size]byte
	// generation is the Dot's generation whose configuration the guest
	// took; 0 when none.
	generation int64
}

// desired is what a guest should hold for a Dot: its secrets and its
// runtime configuration. A problem stops the procedure at the step it
// belongs to.
type desired struct {
	secrets    secretSet
	config     protocol.RuntimeConfig
	generation int64
	keyProblem *keyProblem
	configErr  error
}

func (r *Reconciler) desired(ctx context.Context, dot *dotsv1.Dot) desired {
	d := desired{generation: dot.Generation}
	d.secrets, d.keyProblem = readSecrets(ctx, r.APIReader, dot)
	d.config, d.configErr = RuntimeConfig(dot)
	return d
}

// ready is the READY procedure: push what the guest lacks, again while the
// Dot or its Secrets change under the push, then ask the engine's health.
func (r *Reconciler) ready(ctx context.Context, s *scope, key types.NamespacedName, target guestclient.Target) ctrl.Result {
	want := r.desired(ctx, s.dot)
	for round := 1; ; round++ {
		if p := want.keyProblem; p != nil {
			s.set(&s.key, metav1.ConditionFalse, p.reason, p.message)
			s.set(&s.config, metav1.ConditionFalse, dotsv1.WaitingReason, "waits for the OpenRouter key (KeyPushed)")
			s.set(&s.agent, metav1.ConditionFalse, dotsv1.WaitingReason, "waits for the OpenRouter key (KeyPushed)")
			return ctrl.Result{RequeueAfter: keyPoll}
		}
		pushed, failed, err := r.push(ctx, s, key, target, want)
		if failed {
			return ctrl.Result{RequeueAfter: r.failed(key, err)}
		}
		if !pushed {
			break
		}
		// A key or a configuration stored while this ran must not be lost
		// in the window: read both again, and push again until a round
		// finds them as they were pushed (ref 9.3).
		fresh := &dotsv1.Dot{}
		if err := r.APIReader.Get(ctx, key, fresh); err != nil {
			// The status is written on what was read before; the next
			// reconcile reads again.
			return ctrl.Result{RequeueAfter: retryPoll}
		}
		next := r.desired(ctx, fresh)
		s.dot = fresh
		if next.keyProblem == nil && next.configErr == nil &&
			fresh.Generation == want.generation && next.secrets.digest == want.secrets.digest {
			break
		}
		if round == maxRounds {
			return ctrl.Result{RequeueAfter: time.Millisecond}
		}
		want = next
	}
	return r.health(ctx, s, key, target)
}

// push sends what the guest does not hold yet: the secrets when they are not
// the ones it took, the configuration when its generation is not the one it
// took. It reports whether it sent anything, and whether a push failed (the
// conditions then say which and why) with the call's error, if a call failed.
func (r *Reconciler) push(ctx context.Context, s *scope, key types.NamespacedName, target guestclient.Target, want desired) (pushed, failed bool, err error) {
	rec := r.record(key, target)
	if !rec.keyPushed || rec.secrets != want.secrets.digest {
		if err := r.call(ctx, target, http.MethodPost, protocol.RouteSecrets, want.secrets.req, nil); err != nil {
			s.set(&s.key, metav1.ConditionFalse, dotsv1.PushFailedReason, guestclient.DescribeFailure("the guest did not take the OpenRouter key", http.MethodPost, protocol.RouteSecrets, err, r.callTimeout()))
			s.set(&s.config, metav1.ConditionFalse, dotsv1.WaitingReason, "waits for the OpenRouter key (KeyPushed)")
			s.set(&s.agent, metav1.ConditionFalse, dotsv1.WaitingReason, "waits for the OpenRouter key (KeyPushed)")
			return pushed, true, err
		}
		rec.keyPushed, rec.secrets = true, want.secrets.digest
		r.store(key, rec)
		pushed = true
		// What the guest holds is this agent's memory only: an agent
		// killed here pushes the key again (the engine takes the same key
		// as a no-op, ref 4.3) and then the config, and the Dot was not
		// READY meanwhile (its status is written after the procedure).
		crashpoint.Hit(crashpoint.ReadyKeyPushed)
	}
	msg := "the guest holds the OpenRouter key from " + want.secrets.keyFrom
	if n := want.secrets.mcpCount(); n > 0 {
		msg += fmt.Sprintf(" and %d MCP secret(s)", n)
	}
	s.set(&s.key, metav1.ConditionTrue, dotsv1.KeyPushedReason, msg)

	if want.configErr != nil {
		s.set(&s.config, metav1.ConditionFalse, dotsv1.ConfigInvalidReason, fmt.Sprintf("generation %d: %v", want.generation, want.configErr))
		s.set(&s.agent, metav1.ConditionFalse, dotsv1.WaitingReason, "waits for the configuration (ConfigApplied)")
		return pushed, true, nil
	}
	if rec.generation != want.generation {
		if err := r.call(ctx, target, http.MethodPut, protocol.RouteConfig, want.config, nil); err != nil {
			s.set(&s.config, metav1.ConditionFalse, dotsv1.PushFailedReason,
				guestclient.DescribeFailure(fmt.Sprintf("the guest did not take the configuration of generation %d", want.generation), http.MethodPut, protocol.RouteConfig, err, r.callTimeout()))
			s.set(&s.agent, metav1.ConditionFalse, dotsv1.WaitingReason, "waits for the configuration (ConfigApplied)")
			return pushed, true, err
		}
		rec.generation = want.generation
		r.store(key, rec)
		pushed = true
	}
	s.set(&s.config, metav1.ConditionTrue, dotsv1.ConfigAppliedReason, fmt.Sprintf("the guest applied the configuration of generation %d", want.generation))
	s.config.generation = want.generation
	return pushed, false, nil
}

// health requires the engine's own health: status ok, the key configured,
// and every check of its own passing (ref 9.3).
func (r *Reconciler) health(ctx context.Context, s *scope, key types.NamespacedName, target guestclient.Target) ctrl.Result {
	var h protocol.Health
	if err := r.call(ctx, target, http.MethodGet, protocol.RouteHealth, nil, &h); err != nil {
		s.set(&s.agent, metav1.ConditionFalse, dotsv1.AgentNotAnsweringReason, guestclient.DescribeFailure("the engine's health did not answer", http.MethodGet, protocol.RouteHealth, err, r.callTimeout()))
		return ctrl.Result{RequeueAfter: r.failed(key, err)}
	}
	if !h.OpenRouterConfigured {
		// It took the key, and holds none now: the engine restarted since
		// (its key lives in memory only). Push everything again.
		r.forget(key)
		s.set(&s.agent, metav1.ConditionFalse, dotsv1.AgentStartingReason, "the engine holds no OpenRouter key (it restarted since the push): pushing again")
		return ctrl.Result{RequeueAfter: startingPoll}
	}
	if h.Status != protocol.HealthOK {
		s.set(&s.agent, metav1.ConditionFalse, dotsv1.AgentStartingReason, fmt.Sprintf("the engine says %q", safeWord(h.Status)))
		return ctrl.Result{RequeueAfter: startingPoll}
	}
	var failing []string
	for _, c := range h.Checks {
		if !c.OK {
			f := safeWord(c.Name)
			if c.Detail != "" {
				f += ": " + clip(c.Detail, 200)
			}
			failing = append(failing, f)
		}
	}
	if len(failing) > 0 {
		s.set(&s.agent, metav1.ConditionFalse, dotsv1.AgentStartingReason, "the engine's checks do not pass: "+strings.Join(failing, "; "))
		return ctrl.Result{RequeueAfter: startingPoll}
	}
	s.set(&s.agent, metav1.ConditionTrue, dotsv1.AgentReadyReason, fmt.Sprintf("the engine is ready (state %s)", safeWord(string(h.State))))
	r.mu.Lock()
	delete(r.failures, key)
	delete(r.engineWait, key)
	r.mu.Unlock()
	return ctrl.Result{RequeueAfter: steadyPoll}
}

func (r *Reconciler) callTimeout() time.Duration { return cmp.Or(r.CallTimeout, defaultCallTimeout) }

func (r *Reconciler) call(ctx context.Context, t guestclient.Target, method, route string, in, out any) error {
	cctx, cancel := context.WithTimeout(ctx, r.callTimeout())
	defer cancel()
	return r.Guest.Agent(cctx, t, method, route, in, out)
}

// wordRE is what a word the engine reports looks like (a state, a check's
// name).
var wordRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,40}$`)

// safeWord keeps a word the engine reports to what the protocol's words
// look like.
func safeWord(s string) string {
	if wordRE.MatchString(s) {
		return s
	}
	return "?"
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// record returns what the guest holds as far as this agent knows: nothing
// when the guest is another QEMU than the one pushed to, or when it asked
// to be given everything again.
func (r *Reconciler) record(key types.NamespacedName, t guestclient.Target) record {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec, ok := r.pushed[key]
	if r.stale[key] || !ok || rec.port != t.Port || rec.pid != t.PID || rec.startTicks != t.StartTicks {
		delete(r.stale, key)
		rec = record{port: t.Port, pid: t.PID, startTicks: t.StartTicks}
		r.pushed[key] = rec
	}
	return rec
}

func (r *Reconciler) store(key types.NamespacedName, rec record) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stale[key] {
		// Asked again while this ran: the next reconcile pushes all.
		return
	}
	r.pushed[key] = rec
}

func (r *Reconciler) forget(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.pushed, key)
	delete(r.failures, key)
	delete(r.engineWait, key)
}

// failed counts a failed call to the Dot's guest and says when to try
// again: firstRetry, doubling with each failure in a row, up to retryPoll.
// A guest whose dot-agentd answers while its engine does not listen yet
// (engineNotUp) is one that just booted or woke: it is asked every
// enginePoll for enginePollFor, not counted, since the Dot's first answer
// waits on the push (a doubling wait would add up to half the engine's
// start to every wake).
func (r *Reconciler) failed(key types.NamespacedName, err error) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	if engineNotUp(err) {
		now := r.Clock.Now()
		since, ok := r.engineWait[key]
		if !ok {
			since = now
			r.engineWait[key] = now
		}
		if now.Sub(since) < enginePollFor {
			return enginePoll
		}
	}
	r.failures[key]++
	return retryWait(r.failures[key])
}

// engineNotUp: dot-agentd answered, and the engine behind it did not
// (502 agent_unavailable: its socket is not there yet, or not listening).
func engineNotUp(err error) bool {
	var se *guestclient.StatusError
	return errors.As(err, &se) && se.Status == http.StatusBadGateway && se.Code == protocol.ErrAgentUnavailable
}

// retryWait is the wait after n failures in a row.
func retryWait(n int) time.Duration {
	d := firstRetry
	for i := 1; i < n && d < retryPoll; i++ {
		d *= 2
	}
	return min(d, retryPoll)
}
