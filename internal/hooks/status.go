package hooks

import (
	"context"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/internal/eventtext"
	"github.com/invisible-dots/invisible-dots/internal/patch"
)

// statusWriter is the listener's right to write a Webhook's status: it owns
// no condition.
var statusWriter = patch.Writer{Name: "webhook-listener"}

// maxLastError is the status's bound on lastError.
const maxLastError = 300

// statusBatch gathers what deliveries did to each Webhook's status and
// writes it once per flush: a hundred deliveries a second make one write a
// second per Webhook, not a hundred.
type statusBatch struct {
	client client.Client
	reader client.Reader
	clock  clock.PassiveClock
	log    logr.Logger

	mu      sync.Mutex
	pending map[types.NamespacedName]*delta
}

// delta is what is not written yet of a Webhook's status.
type delta struct {
	uid                           types.UID
	accepted, duplicates, refused int64
	lastDelivery                  time.Time
	lastTask                      string
	lastError                     string
	lastErrorTime                 time.Time
}

func newStatusBatch(c client.Client, r client.Reader, clk clock.PassiveClock, log logr.Logger) *statusBatch {
	return &statusBatch{client: c, reader: r, clock: clk, log: log, pending: map[types.NamespacedName]*delta{}}
}

// of is the Webhook's delta; the caller holds mu.
func (s *statusBatch) of(wh *dotsv1.Webhook) *delta {
	key := types.NamespacedName{Namespace: wh.Namespace, Name: wh.Name}
	d, ok := s.pending[key]
	if !ok || d.uid != wh.UID {
		d = &delta{uid: wh.UID}
		s.pending[key] = d
	}
	return d
}

func (s *statusBatch) accepted(wh *dotsv1.Webhook, task string, duplicate bool, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.of(wh)
	if duplicate {
		d.duplicates++
	} else {
		d.accepted++
	}
	d.lastDelivery, d.lastTask = now, task
}

func (s *statusBatch) refused(wh *dotsv1.Webhook, why string, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.of(wh)
	d.refused++
	d.lastError, d.lastErrorTime = eventtext.Cut(why, maxLastError), now
}

// run flushes every period until ctx ends, then calls also.
func (s *statusBatch) run(ctx context.Context, period time.Duration, also func()) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.flush(ctx)
			also()
		}
	}
}

// flush writes each pending delta over the Webhook's status, through the
// one status helper (written over the version read). A write that loses
// a Conflict keeps its delta for the next flush; a Webhook gone drops it.
func (s *statusBatch) flush(ctx context.Context) {
	s.mu.Lock()
	todo := s.pending
	s.pending = map[types.NamespacedName]*delta{}
	s.mu.Unlock()
	for key, d := range todo {
		if err := s.write(ctx, key, d); err != nil {
			if apierrors.IsNotFound(err) || ctx.Err() != nil {
				continue
			}
			if !apierrors.IsConflict(err) {
				s.log.Error(err, "webhook: write the status", "webhook", key.String())
			}
			s.mu.Lock()
			if later, ok := s.pending[key]; ok && later.uid == d.uid {
				merge(d, later)
			}
			s.pending[key] = d
			s.mu.Unlock()
		}
	}
}

// merge adds what came later onto d.
func merge(d, later *delta) {
	d.accepted += later.accepted
	d.duplicates += later.duplicates
	d.refused += later.refused
	if !later.lastDelivery.IsZero() {
		d.lastDelivery, d.lastTask = later.lastDelivery, later.lastTask
	}
	if !later.lastErrorTime.IsZero() {
		d.lastError, d.lastErrorTime = later.lastError, later.lastErrorTime
	}
}

func (s *statusBatch) write(ctx context.Context, key types.NamespacedName, d *delta) error {
	wh := &dotsv1.Webhook{}
	if err := s.reader.Get(ctx, key, wh); err != nil {
		return err
	}
	if wh.UID != d.uid {
		return apierrors.NewNotFound(dotsv1.GroupVersion.WithResource("webhooks").GroupResource(), key.Name)
	}
	h := patch.NewHelper(s.client, statusWriter, wh)
	st := &wh.Status
	st.Accepted += d.accepted
	st.Duplicates += d.duplicates
	st.Refused += d.refused
	if !d.lastDelivery.IsZero() {
		st.LastDeliveryTime = &metav1.Time{Time: d.lastDelivery.Truncate(time.Second)}
		st.LastTaskName = d.lastTask
	}
	if !d.lastErrorTime.IsZero() {
		st.LastError = d.lastError
		st.LastErrorTime = &metav1.Time{Time: d.lastErrorTime.Truncate(time.Second)}
	}
	_, err := h.Patch(ctx, wh)
	return err
}
