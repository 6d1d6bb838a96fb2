package hub

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/invisible-dots/invisible-dots/internal/channels"
	"github.com/invisible-dots/invisible-dots/internal/eventtext"
	"github.com/invisible-dots/invisible-dots/internal/store"
)

// Adapter is a channel's transport as the hub drives it.
type Adapter interface {
	Run(ctx context.Context, sink channels.Sink) error
	Sender
}

// A binding's states (ref 9.8), which its Channel's status says.
const (
	StateConnecting  = "connecting"
	StateConnected   = "connected"
	StateNeedsRelink = "needs_relink"
	StateError       = "error"
)

// Status is a binding's state and why, never holding a credential.
type Status struct {
	State  string
	Detail string
}

// Serve runs one binding until ctx ends: its adapter, started again on a
// fresh instance after an exponential backoff (1 s up to 60 s, with jitter)
// when it fails, and stopped for good when the channel refuses the link
// (needs_relink: the person links again); and its way out, stepped when the
// Dot's log has news.
type Serve struct {
	Binding     Binding
	Store       *store.Store
	NotifyTasks bool
	// Approvals answers approvals; nil sends no prompt.
	Approvals Approvals
	// AskInChat and ShowArguments are the Channel's approvals and
	// showArguments settings.
	AskInChat     bool
	ShowArguments bool
	// OnPaired hears that a person paired.
	OnPaired func()
	// NewAdapter makes a fresh adapter for each start.
	NewAdapter func() (Adapter, error)
	// Secrets are the link's credentials, replaced in every detail.
	Secrets []string
	// OnStatus hears each change of the binding's status, once.
	OnStatus func(Status)
	// News is the Dot's log having new events (the store's notifications).
	News <-chan struct{}
	Log  logr.Logger

	mu   sync.Mutex
	last Status
}

// maxDetail bounds a status's reason (ref 9.8).
const maxDetail = 300

func (s *Serve) setStatus(st Status) {
	st.Detail = eventtext.Cut(channels.Scrub(st.Detail, s.Secrets...), maxDetail)
	s.mu.Lock()
	changed := st != s.last
	s.last = st
	s.mu.Unlock()
	if changed && s.OnStatus != nil {
		s.OnStatus(st)
	}
}

// backoff is the wait before the attempt-th restart (from 0).
func backoff(attempt int) time.Duration {
	d := time.Second << min(attempt, 6)
	d = min(d, time.Minute)
	// Up to a fifth less, so adapters that failed together do not retry together.
	return d - time.Duration(rand.Int64N(int64(d/5)+1))
}

// Run serves the binding until ctx ends or the link needs a relink.
func (s *Serve) Run(ctx context.Context) error {
	bucket := &channels.Bucket{}
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for attempt := 0; ; attempt++ {
		s.setStatus(Status{State: StateConnecting})
		a, err := s.NewAdapter()
		if err == nil {
			err = s.runOnce(ctx, a, bucket, &wg)
		}
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, channels.ErrNeedsRelink) {
			s.setStatus(Status{State: StateNeedsRelink, Detail: err.Error()})
			return err
		}
		detail := "the link stopped"
		if err != nil {
			detail = err.Error()
		}
		s.setStatus(Status{State: StateError, Detail: detail})
		wait := backoff(attempt)
		var after *channels.RetryAfterError
		if errors.As(err, &after) {
			wait = max(wait, after.After)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// runOnce runs one adapter and its way out until the adapter stops.
func (s *Serve) runOnce(ctx context.Context, a Adapter, bucket *channels.Bucket, wg *sync.WaitGroup) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	prompts := &Prompts{Binding: s.Binding, Store: s.Store, Approvals: s.Approvals, Send: a, On: s.AskInChat, ShowArguments: s.ShowArguments, Log: s.Log}
	// A pairing brings the prompts up to date: the new owner gets the
	// requests that wait.
	resync := make(chan struct{}, 1)
	paired := func() {
		select {
		case resync <- struct{}{}:
		default:
		}
		if s.OnPaired != nil {
			s.OnPaired()
		}
	}
	sink := &sink{
		in:      &Inbound{Binding: s.Binding, Store: s.Store, Reply: a, Bucket: bucket, Prompts: prompts, OnPaired: paired, Log: s.Log},
		prompts: prompts,
		connected: func() {
			s.setStatus(Status{State: StateConnected})
		},
	}
	out := &Outbound{Binding: s.Binding, Store: s.Store, Send: a, NotifyTasks: s.NotifyTasks, Prompts: prompts, Log: s.Log}
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.stepOut(ctx, out, resync)
	}()
	return a.Run(ctx, sink)
}

// stepOut brings the prompts up to date and sends what the log holds at
// start, sends at each news, and brings the prompts up to date again at
// each pairing, retrying a failed send with backoff.
func (s *Serve) stepOut(ctx context.Context, out *Outbound, resync <-chan struct{}) {
	failures := 0
	synced := false
	for {
		wait := time.Duration(-1)
		err := out.Step(ctx)
		if err == nil && !synced {
			if err = out.Prompts.Sync(ctx); err == nil {
				synced = true
			}
		}
		if err != nil && ctx.Err() == nil {
			s.Log.V(1).Info("a channel's send failed; it is tried again", "channel", s.Binding.UID, "err", channels.Scrub(err.Error(), s.Secrets...))
			wait = backoff(failures)
			var after *channels.RetryAfterError
			if errors.As(err, &after) {
				wait = max(wait, after.After)
			}
			failures++
		} else {
			failures = 0
		}
		var retry <-chan time.Time
		if wait >= 0 {
			retry = time.After(wait)
		}
		select {
		case <-ctx.Done():
			return
		case <-s.News:
		case <-resync:
			synced = false
		case <-retry:
		}
	}
}

// sink is the hub's side of one run of an adapter.
type sink struct {
	in        *Inbound
	prompts   *Prompts
	connected func()
}

func (k *sink) Connected() { k.connected() }

func (k *sink) Inbound(ctx context.Context, in channels.Inbound) error { return k.in.Inbound(ctx, in) }

// Pressed answers a button press (Prompts.Press).
func (k *sink) Pressed(ctx context.Context, p channels.Press) (string, error) {
	return k.prompts.Press(ctx, p)
}
