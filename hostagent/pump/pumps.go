package pump

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"

	"github.com/invisible-dots/invisible-dots/hostagent/guestclient"
	"github.com/invisible-dots/invisible-dots/hostagent/guestnotice"
)

// Pumps runs one pump per Dot of this host whose READY procedure completed,
// as the guest link's notices tell: it is a guestnotice.Listener and a
// manager Runnable.
type Pumps struct {
	Host   string
	Guest  Streamer
	Ingest Ingester
	// Started is called with the Dot on each agent.started of its guest:
	// the guest link's RequestPush. It must not block.
	Started func(key types.NamespacedName)
	// BatchSize, FlushDelay and Retry are each pump's (Pump says what
	// zero means).
	BatchSize  int
	FlushDelay time.Duration
	Retry      time.Duration
	Log        logr.Logger

	// Latest is where the guest link's notices wait for the loop.
	guestnotice.Latest
}

var _ guestnotice.Listener = (*Pumps)(nil)

// NeedLeaderElection: every host agent pumps its own guests.
func (p *Pumps) NeedLeaderElection() bool { return false }

// running is a pump that runs.
type running struct {
	target guestclient.Target
	uid    types.UID
	cancel context.CancelFunc
	done   chan struct{}
}

func (r *running) ended() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// change is what a notice asks of a Dot's pump.
type change string

const (
	keep    change = "keep"
	start   change = "start"
	stop    change = "stop"
	restart change = "restart"
)

// decide is the rule: a pump runs from the completion of the READY
// procedure on a guest for as long as that guest (the same QEMU of the same
// Dot) can be reached. A READY that fails later (the engine restarting)
// keeps the pump: the stream drops and is opened again. run is the Dot's
// pump, nil when none runs.
func decide(n guestnotice.Notice, run *running) change {
	noGuest := n.Target == guestclient.Target{}
	switch {
	case run == nil && n.Ready && !noGuest:
		return start
	case run == nil:
		return keep
	case noGuest:
		return stop
	case run.target != n.Target || run.uid != n.DotUID:
		if n.Ready {
			return restart
		}
		return stop
	}
	return keep
}

// Start runs the pumps until ctx ends.
func (p *Pumps) Start(ctx context.Context) error {
	pumps := map[types.NamespacedName]*running{}
	defer func() {
		for _, r := range pumps {
			r.cancel()
		}
		for _, r := range pumps {
			<-r.done
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-p.Wake():
		}
		for _, n := range p.Take() {
			run := pumps[n.Key]
			if run != nil && run.ended() {
				delete(pumps, n.Key)
				run = nil
			}
			switch decide(n, run) {
			case start:
				pumps[n.Key] = p.run(ctx, n)
			case stop:
				p.halt(n.Key, run)
				delete(pumps, n.Key)
			case restart:
				p.halt(n.Key, run)
				pumps[n.Key] = p.run(ctx, n)
			}
		}
	}
}

// run starts a pump for the guest the notice names.
func (p *Pumps) run(ctx context.Context, n guestnotice.Notice) *running {
	pctx, cancel := context.WithCancel(ctx)
	r := &running{target: n.Target, uid: n.DotUID, cancel: cancel, done: make(chan struct{})}
	key := n.Key
	log := p.Log.WithValues("dot", key.String(), "guest", n.Target.String())
	pump := &Pump{
		Host: p.Host, Key: key, DotUID: string(n.DotUID), Target: n.Target, Guest: p.Guest, Ingest: p.Ingest,
		BatchSize: p.BatchSize, FlushDelay: p.FlushDelay, Retry: p.Retry, Log: log,
	}
	if p.Started != nil {
		pump.Started = func() { p.Started(key) }
	}
	log.V(1).Info("the event pump starts")
	go func() {
		defer close(r.done)
		if err := pump.Run(pctx); err != nil {
			log.Info("the event pump stopped", "err", err.Error())
		}
	}()
	return r
}

// halt stops a pump and waits for it, briefly: a pump that has not
// stopped by then stops on its own, and the ingestion takes a seq once
// whoever sends it.
func (p *Pumps) halt(key types.NamespacedName, r *running) {
	r.cancel()
	select {
	case <-r.done:
	case <-time.After(5 * time.Second):
		p.Log.Info("an event pump is slow to stop", "dot", key.String())
	}
}
