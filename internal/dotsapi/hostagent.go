package dotsapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
	"github.com/invisible-dots/invisible-dots/internal/hostidentity"
	"github.com/invisible-dots/invisible-dots/internal/lifecycle"
	"github.com/invisible-dots/invisible-dots/internal/store"
)

// The host agents' routes (DESIGN.md 4): a host agent never touches
// PostgreSQL, so it hands its guests' events to these and reads and
// acknowledges the outbox rows it delivers through them. RBAC lets only the
// host agents' ClusterRole (and administrators) through their prefix; each
// route then checks that the caller acts for the host it names, and that the
// Dot's Computer is on that host.

// hostDot checks the caller of a host route and returns the Dot it names.
// A host agent (its ServiceAccount, hostidentity.ServiceAccount) acts for
// its own host only; anyone else must be allowed to write that host's status,
// as an administrator is (the in-process agent of `invisible-dots server`
// uses the admin loopback credential). The Dot's Computer must be on the
// host, whoever calls.
func (h *Handler) hostDot(r *http.Request) (host string, d *dotsv1.Dot, err error) {
	p, err := pathValues(r, "host", "ns", "name")
	if err != nil {
		return "", nil, err
	}
	host, ns, name := p[0], p[1], p[2]
	if err := h.checkHostCaller(r, host); err != nil {
		return "", nil, err
	}
	d, err = h.getDot(r.Context(), ns, name)
	if err != nil {
		return "", nil, err
	}
	if err := h.checkOnHost(r.Context(), d, host); err != nil {
		return "", nil, err
	}
	return host, d, nil
}

// checkHostCaller refuses a caller that may not act for host: a host
// agent (its ServiceAccount, hostidentity.ServiceAccount) acts for its
// own host only; anyone else must be allowed to write that host's status.
func (h *Handler) checkHostCaller(r *http.Request, host string) error {
	u, err := callerOf(r)
	if err != nil {
		return err
	}
	if agentOf, ok := hostidentity.HostOfUser(u.GetName()); ok {
		if agentOf != host {
			return apiErrorf(http.StatusForbidden, wire.CodeForbidden, "%s may act for its own host only, not for host %q", u.GetName(), host)
		}
		return nil
	}
	return h.authorize(r.Context(), authorizer.AttributesRecord{
		User: u, Verb: "update", Name: host, ResourceRequest: true,
		APIGroup: dotsv1.GroupVersion.Group, APIVersion: dotsv1.GroupVersion.Version, Resource: "hosts", Subresource: "status",
	})
}

// checkOnHost refuses a Dot whose Computer (its own: same name, controlled by
// it) is not placed on host.
func (h *Handler) checkOnHost(ctx context.Context, d *dotsv1.Dot, host string) error {
	c := &dotsv1.Computer{}
	if err := h.dots.Get(ctx, client.ObjectKeyFromObject(d), c); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return apiErrorf(http.StatusNotFound, wire.CodeNotFound, "the Dot %s/%s has no Computer yet", d.Namespace, d.Name)
		}
		return fmt.Errorf("read the Computer %s/%s: %w", d.Namespace, d.Name, err)
	}
	if !metav1.IsControlledBy(c, d) || c.Spec.NodeName != host {
		return apiErrorf(http.StatusForbidden, wire.CodeForbidden, "the Computer of the Dot %s/%s is not on host %q", d.Namespace, d.Name, host)
	}
	return nil
}

// ingestEvents stores a batch of one Dot's guest events, each under the
// guest's seq, with the cursor in the same transaction: a batch sent again
// stores nothing twice. An event the protocol refuses is stored as
// wire.EventGuestRefused with the reason, under its seq, so the pump moves on.
func (h *Handler) ingestEvents(w http.ResponseWriter, r *http.Request) error {
	_, d, err := h.hostDot(r)
	if err != nil {
		return err
	}
	var batch wire.EventBatch
	if err := decode(w, r, wire.MaxEventsBody, &batch); err != nil {
		return err
	}
	if err := checkBatch(d, batch); err != nil {
		return err
	}
	dot := storeDot(d)
	events := make([]store.Event, 0, len(batch.Events))
	for _, ev := range batch.Events {
		e := store.Event{Dot: dot, Type: ev.Type, Data: ev.Data, Source: store.SourceGuest, GuestSeq: &ev.Seq}
		if _, err := protocol.ParseOutbound(ev); err != nil {
			refused := wire.GuestEventRefused{ID: ev.ID, Type: ev.Type, TS: ev.TS, Data: ev.Data, Reason: err.Error()}
			if e.Data, err = json.Marshal(refused); err != nil {
				return err
			}
			e.Type = wire.EventGuestRefused
		}
		events = append(events, e)
	}
	stored, cursor, err := h.store.AppendGuestEvents(r.Context(), dot, events, refuseStored(batch.Events))
	if err != nil {
		return err
	}
	out := wire.Ingested{Stored: len(stored), Cursor: cursor}
	for _, e := range stored {
		if e.Type == wire.EventGuestRefused {
			out.Refused++
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// refuseStored makes the stand-in of a guest event PostgreSQL would not
// store: wire.EventGuestRefused with the event's id, type and time and the
// reason, without the data it could not hold.
func refuseStored(sent []protocol.OutboundEvent) store.Refuser {
	return func(e store.Event, reason string) store.Event {
		refused := wire.GuestEventRefused{Type: e.Type, Reason: reason}
		for _, ev := range sent {
			if e.GuestSeq != nil && ev.Seq == *e.GuestSeq {
				refused.ID, refused.Type, refused.TS = ev.ID, ev.Type, ev.TS
			}
		}
		data, _ := json.Marshal(refused)
		return store.Event{Type: wire.EventGuestRefused, Data: data}
	}
}

// checkBatch refuses a batch the log cannot take as a whole: another Dot's,
// too long, or with seqs that do not increase from 1 up.
func checkBatch(d *dotsv1.Dot, b wire.EventBatch) error {
	switch {
	case b.DotUID == "":
		return badRequest("dot_uid is missing: name the Dot the events are of by its UID")
	case b.DotUID != string(d.UID):
		return apiErrorf(http.StatusConflict, wire.CodeDotChanged, "the Dot %s/%s has UID %s, not %s: it was made again since", d.Namespace, d.Name, d.UID, b.DotUID)
	case len(b.Events) > wire.MaxEventBatch:
		return badRequest("the batch holds %d events; at most %d a batch", len(b.Events), wire.MaxEventBatch)
	}
	var last int64
	for i, ev := range b.Events {
		if ev.Seq < 1 {
			return badRequest("events[%d] has seq %d: a guest's seq starts at 1", i, ev.Seq)
		}
		if ev.Seq <= last {
			return badRequest("events[%d] has seq %d after %d: seqs must increase", i, ev.Seq, last)
		}
		last = ev.Seq
	}
	return nil
}

// getOutbox answers the Dot's rows neither delivered nor dropped, in order.
func (h *Handler) getOutbox(w http.ResponseWriter, r *http.Request) error {
	_, d, err := h.hostDot(r)
	if err != nil {
		return err
	}
	if len(r.URL.Query()) != 0 {
		return badRequest("the outbox takes no query parameters")
	}
	rows, err := h.store.Pending(r.Context(), string(d.UID))
	if err != nil {
		return err
	}
	held, err := h.spendCapHolds(r.Context(), d.Namespace)
	if err != nil {
		return err
	}
	if held {
		rows = rows[:heldFrom(rows)]
	}
	out := wire.Outbox{DotUID: string(d.UID), Rows: make([]wire.OutboxRow, 0, len(rows))}
	for _, in := range rows {
		out.Rows = append(out.Rows, wire.OutboxRow{
			Seq: in.Seq,
			Event: protocol.InboundEvent{
				ID: in.ID, Type: in.Type, TS: in.TS.UTC().Format(time.RFC3339Nano), Data: in.Data,
			},
			TaskUID: in.TaskUID, Run: in.Run, CreatedAt: in.CreatedAt, SentAt: in.SentAt,
			Failures: in.Failures, LastError: in.LastError, RetryAt: in.RetryAt,
		})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// waitOutbox answers the host's Dots that had outbox rows enqueued since
// the caller's cursor, waiting up to ?wait= for one: the deliverer's long
// poll, so a row goes to its guest as soon as its transaction commits rather
// than at the deliverer's next pass. Without a cursor of this server's (a
// first call, a restart, lost notifications) it answers every Dot of the
// host with a row waiting, at once.
func (h *Handler) waitOutbox(w http.ResponseWriter, r *http.Request) error {
	p, err := pathValues(r, "host")
	if err != nil {
		return err
	}
	host := p[0]
	if err := h.checkHostCaller(r, host); err != nil {
		return err
	}
	q := r.URL.Query()
	for k := range q {
		if k != "after" && k != "wait" {
			return badRequest("the host's outbox takes ?after= and ?wait=, not ?%s=", k)
		}
	}
	cur, err := store.ParseCursor(q.Get("after"))
	if err != nil {
		return badRequest("after: %v", err)
	}
	var wait time.Duration
	if v := q.Get("wait"); v != "" {
		if wait, err = time.ParseDuration(v); err != nil || wait < 0 || wait > wire.MaxOutboxWait {
			return badRequest("wait %q is not a duration from 0s to %s", v, wire.MaxOutboxWait)
		}
	}
	if h.changes == nil {
		return apiErrorf(http.StatusNotImplemented, wire.CodeNotImplemented, "this server does not follow the outbox's notifications: read each Dot's outbox instead")
	}
	timeout := time.NewTimer(wait)
	defer timeout.Stop()
	for {
		payloads, next, complete, changed := h.changes.Since(cur)
		out := wire.OutboxChanges{Cursor: next.String(), Complete: complete, Dots: []wire.DotRef{}}
		var dots []store.Dot
		if complete {
			for _, p := range payloads {
				if d, ok := store.ParseOutboxPayload(p); ok {
					dots = append(dots, d)
				}
			}
		} else if dots, err = h.store.DueDots(r.Context(), h.clock.Now()); err != nil {
			return err
		}
		if out.Dots, err = h.onHost(r.Context(), host, dots); err != nil {
			return err
		}
		if len(out.Dots) > 0 || !complete {
			writeJSON(w, http.StatusOK, out)
			return nil
		}
		cur = next
		select {
		case <-changed:
		case <-timeout.C:
			writeJSON(w, http.StatusOK, out)
			return nil
		case <-r.Context().Done():
			return nil // the agent went, or the server stops: no one to answer
		}
	}
}

// onHost keeps the Dots (once each) whose Computer is on host.
func (h *Handler) onHost(ctx context.Context, host string, dots []store.Dot) ([]wire.DotRef, error) {
	out := []wire.DotRef{}
	seen := map[string]bool{}
	for _, d := range dots {
		if seen[d.UID] {
			continue
		}
		seen[d.UID] = true
		c := &dotsv1.Computer{}
		err := h.dots.Get(ctx, client.ObjectKey{Namespace: d.Namespace, Name: d.Name}, c)
		if client.IgnoreNotFound(err) != nil {
			return nil, fmt.Errorf("read the Computer %s/%s: %w", d.Namespace, d.Name, err)
		}
		if owner := metav1.GetControllerOf(c); err == nil && c.Spec.NodeName == host && owner != nil && string(owner.UID) == d.UID {
			out = append(out, wire.DotRef{Namespace: d.Namespace, Name: d.Name, UID: d.UID})
		}
	}
	return out, nil
}

// ackOutbox records what became of a send of one of the Dot's rows.
func (h *Handler) ackOutbox(w http.ResponseWriter, r *http.Request) error {
	_, d, err := h.hostDot(r)
	if err != nil {
		return err
	}
	p, err := pathValues(r, "id")
	if err != nil {
		return err
	}
	id := p[0]
	var ack wire.Ack
	if err := decode(w, r, wire.MaxAckBody, &ack); err != nil {
		return err
	}
	if err := checkAck(ack); err != nil {
		return err
	}
	row, err := h.store.Inbound(r.Context(), string(d.UID), id)
	if errors.Is(err, store.ErrNotFound) {
		return apiErrorf(http.StatusNotFound, wire.CodeNotFound, "the Dot %s/%s has no outbox row %q", d.Namespace, d.Name, id)
	}
	if err != nil {
		return err
	}
	now := h.clock.Now()
	out := wire.Acked{ID: id, Outcome: ack.Outcome, Failures: row.Failures}
	switch ack.Outcome {
	case wire.OutcomeSent:
		var marked bool
		if marked, err = h.store.MarkSent(r.Context(), id, now); err == nil && !marked {
			return apiErrorf(http.StatusConflict, wire.CodeNotPending, "outbox row %q was delivered or dropped meanwhile: do not send it", id)
		}
	case wire.OutcomeDelivered:
		err = h.store.MarkDelivered(r.Context(), id, deliveredAt(ack, row, now))
	case wire.OutcomeFailed:
		out.Failures, err = h.store.RecordFailure(r.Context(), id, ack.Reason, *ack.RetryAt)
	case wire.OutcomeDropped:
		err = h.store.Drop(r.Context(), id, ack.Reason, now)
	case wire.OutcomeGivenUp:
		if row.Type != protocol.InboundTaskCreated || row.TaskUID == "" {
			return badRequest("outcome given_up is for a task's task.created; row %q is a %s", id, row.Type)
		}
		data, merr := json.Marshal(wire.TaskFailed{TaskID: row.TaskUID, Run: row.Run, Error: "the task could not be given to its Dot: " + ack.Reason})
		if merr != nil {
			return merr
		}
		failed := store.Event{Dot: storeDot(d), Type: wire.EventTaskFailed, Source: store.SourceHost, Data: data}
		out.TaskFailed, err = h.store.GiveUpTask(r.Context(), id, ack.Reason, now, failed)
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// deliveredAt is the delivery's time: the guest's answer as the deliverer
// saw it, when it falls between the send's start and now; now otherwise.
func deliveredAt(a wire.Ack, row store.Inbound, now time.Time) time.Time {
	if a.At == nil || row.SentAt == nil || a.At.After(now) || a.At.Before(*row.SentAt) {
		return now
	}
	return *a.At
}

// checkAck refuses an acknowledgement that lacks what its outcome needs or
// carries what it does not take.
func checkAck(a wire.Ack) error {
	if len(a.Reason) > wire.MaxReason {
		return badRequest("reason is %d bytes; at most %d", len(a.Reason), wire.MaxReason)
	}
	if a.At != nil && a.Outcome != wire.OutcomeDelivered {
		return badRequest("outcome %s takes no at (only delivered does)", a.Outcome)
	}
	switch a.Outcome {
	case wire.OutcomeSent, wire.OutcomeDelivered:
		if a.Reason != "" || a.RetryAt != nil {
			return badRequest("outcome %s takes no reason and no retry_at", a.Outcome)
		}
	case wire.OutcomeFailed:
		if a.Reason == "" || a.RetryAt == nil {
			return badRequest("outcome failed needs a reason and a retry_at")
		}
	case wire.OutcomeDropped, wire.OutcomeGivenUp:
		if a.Reason == "" || a.RetryAt != nil {
			return badRequest("outcome %s needs a reason and takes no retry_at", a.Outcome)
		}
	default:
		return badRequest("outcome %q is none of sent, delivered, failed, dropped, given_up", a.Outcome)
	}
	return nil
}

// spendCapHolds reports whether the namespace's daily spend cap holds new
// work (its DotQuota's SpendCapReached condition is True).
func (h *Handler) spendCapHolds(ctx context.Context, namespace string) (bool, error) {
	q := &dotsv1.DotQuota{}
	if err := h.dots.Get(ctx, client.ObjectKey{Namespace: namespace, Name: dotsv1.DotQuotaName}, q); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	return meta.IsStatusConditionTrue(q.Status.Conditions, dotsv1.SpendCapReachedCondition), nil
}

// heldFrom is how many of the outbox's rows go while the spend cap holds
// (lifecycle.Deliverable).
func heldFrom(rows []store.Inbound) int {
	types := make([]string, len(rows))
	for i, in := range rows {
		types[i] = in.Type
	}
	return lifecycle.Deliverable(types)
}
