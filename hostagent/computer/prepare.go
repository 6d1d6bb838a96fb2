package computer

import (
	"context"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/hostagent/driver"
)

// prepareWait is how long a reconcile waits for the engine's prepare-sleep
// before it lets the worker go and looks again: an engine with nothing in
// flight answers at once, and one finishing a tool or closing its browsers
// (up to prepareSleepCall) does not hold a reconcile worker meanwhile.
const prepareWait = time.Second

// prepareCall is one prepare-sleep in flight for one QEMU.
type prepareCall struct {
	pid  int
	once sync.Once
	done chan struct{}
	err  error
}

// prepareSleep asks the VM's engine to prepare for a sleep (ref 5.3,
// 8.7), bounded by prepareSleepCall, off the reconcile: the call runs on
// its own, and this says whether it ended (and how) within prepareWait;
// a later reconcile asks again and gets the answer. A call is for one
// QEMU: a new one is asked again. An agent that restarts meanwhile asks
// again, which the engine takes as the same request.
func (r *Reconciler) prepareSleep(ctx context.Context, c *dotsv1.Computer, obs driver.Observation, token string) (bool, error) {
	v, _ := r.prepares.LoadOrStore(c.UID, &prepareCall{pid: obs.PID, done: make(chan struct{})})
	p := v.(*prepareCall)
	if p.pid != obs.PID {
		r.prepares.Delete(c.UID)
		return r.prepareSleep(ctx, c, obs, token)
	}
	// What the call needs of c is read now: c is the reconcile's, which
	// writes it again while the call runs.
	key, id := client.ObjectKeyFromObject(c), VMID(c)
	p.start(func() error {
		// The engine's answer wakes the Computer: the next reconcile sees
		// it and powers the guest off.
		defer r.wake(key)
		sp, ok := r.Driver.(driver.SleepPreparer)
		if !ok {
			return nil // a guest channel that cannot ask: powered off unprepared
		}
		pctx, cancel := context.WithTimeout(context.Background(), prepareSleepCall)
		defer cancel()
		return sp.PrepareSleep(pctx, id, token)
	})
	t := time.NewTimer(prepareWait)
	defer t.Stop()
	select {
	case <-p.done:
		r.prepares.Delete(c.UID)
		return true, p.err
	case <-t.C:
		return false, nil
	case <-ctx.Done():
		return false, nil
	}
}

// start runs call once for this prepareCall.
func (p *prepareCall) start(call func() error) {
	p.once.Do(func() {
		go func() {
			p.err = call()
			close(p.done)
		}()
	})
}

// wake enqueues the Computer (when the reconciler runs in a manager): an
// ask it made in the background was answered.
func (r *Reconciler) wake(key client.ObjectKey) {
	if r.answers == nil {
		return
	}
	select {
	case r.answers <- event.GenericEvent{Object: &dotsv1.Computer{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}}:
	default:
		// Full: the Computer's own poll (transitionPoll) looks again.
	}
}
