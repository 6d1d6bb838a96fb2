package hub

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/invisible-dots/invisible-dots/internal/channels"
	"github.com/invisible-dots/invisible-dots/internal/channels/port"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
	"github.com/invisible-dots/invisible-dots/internal/store"
)

// Config is one binding as its Channel says it should run. Two Configs
// that are equal run the same way; any change starts the link again.
type Config struct {
	// Namespace and Name are the Channel's, which Changed names.
	Namespace, Name string
	Binding         Binding
	Link            Link
	// CredentialsGiven is when the credentials were last given: a link
	// stopped for a relink starts again when it changes.
	CredentialsGiven string
	NotifyTasks      bool
	AskInChat        bool
	ShowArguments    bool
}

// Hub runs every enabled Channel's link (ref 9.8). It is a runnable of the
// control plane that runs on the leader only: two pollers on one bot fail.
// The Channel controller tells it what runs (Ensure, Stop) and reads back
// what happened (Status); Changed wakes the controller when a link's
// status changes or a person pairs.
type Hub struct {
	Store     *store.Store
	Kinds     Kinds
	Approvals Approvals
	// Changed hears that the Channel namespace/name has news for its
	// status.
	Changed func(namespace, name string)
	// Devices gives a binding of a kind linked by a code its device's
	// keys and its link codes' listener; nil links none.
	Devices func(cfg Config) (port.KeyStore, port.Linking)
	// Poll reads the log this often besides its notifications (5 s when 0).
	Poll time.Duration
	Log  logr.Logger

	mu      sync.Mutex
	ctx     context.Context
	running map[string]*running
}

// running is one binding's link.
type running struct {
	cfg Config
	// account is the account a device linked by a code reported.
	account *channels.Account
	mu      sync.Mutex
	serve   *Serve
	news    chan struct{}
	cancel  context.CancelFunc
	done    chan struct{}
}

// ErrNotLeading: the hub runs on the leader only, and this process does
// not lead (or has not started yet); the controller tries again.
var ErrNotLeading = errors.New("the channel hub is not running in this process yet")

// Start runs the hub until ctx ends; every link stops with it.
func (h *Hub) Start(ctx context.Context) error {
	h.mu.Lock()
	h.ctx = ctx
	if h.running == nil {
		h.running = map[string]*running{}
	}
	h.mu.Unlock()
	poll := h.Poll
	if poll == 0 {
		poll = 5 * time.Second
	}
	// A wake-up only (the Store's one listener, shared): each link reads
	// its Dot's log from its cursor.
	stored := h.Store.Wakeups(store.EventsChannel, h.Log.WithName("channel-log-follower"))
	listened := make(chan struct{})
	go func() {
		defer close(listened)
		_ = stored.Run(ctx)
	}()
	// Each link is woken when its Dot's log has news (the Dots with events
	// past the last read), and every poll besides, for a notification
	// the listening connection lost.
	after, err := h.Store.LastEventID(ctx)
	if err != nil {
		h.stopAll()
		<-listened
		return err
	}
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		_, _, _, changed := stored.Since(store.Cursor{})
		all := false
		select {
		case <-ctx.Done():
			h.stopAll()
			<-listened
			return nil
		case <-changed:
		case <-t.C:
			all = true
		}
		dots, last, err := h.Store.DotsWithEventsAfter(ctx, after, 5000)
		news := map[string]bool{}
		if err != nil {
			all = true
		} else {
			after = last
			for _, d := range dots {
				news[d.UID] = true
			}
		}
		h.mu.Lock()
		for _, r := range h.running {
			if !all && !news[r.cfg.Binding.Dot.UID] {
				continue
			}
			select {
			case r.news <- struct{}{}:
			default:
			}
		}
		h.mu.Unlock()
	}
}

func (h *Hub) stopAll() {
	h.mu.Lock()
	all := h.running
	h.running = map[string]*running{}
	h.ctx = nil
	h.mu.Unlock()
	for _, r := range all {
		r.cancel()
		<-r.done
	}
}

// Ensure runs cfg's binding as cfg says: started when it does not run,
// started again when it runs otherwise (new credentials, new settings),
// left alone when it runs so already.
func (h *Hub) Ensure(cfg Config) error {
	k, ok := h.Kinds[cfg.Binding.Kind]
	if !ok {
		return errors.New("the server does not run " + wire.ChannelKindName(cfg.Binding.Kind) + " channels")
	}
	h.mu.Lock()
	if h.ctx == nil {
		h.mu.Unlock()
		return ErrNotLeading
	}
	old := h.running[cfg.Binding.UID]
	if old != nil && old.cfg == cfg {
		h.mu.Unlock()
		return nil
	}
	delete(h.running, cfg.Binding.UID)
	parent := h.ctx
	h.mu.Unlock()
	if old != nil {
		old.cancel()
		<-old.done
	}
	ctx, cancel := context.WithCancel(parent)
	r := &running{cfg: cfg, news: make(chan struct{}, 1), cancel: cancel, done: make(chan struct{})}
	var dev Device
	if k.LinkedBy == LinkedByCode && h.Devices != nil {
		dev.Keys, dev.Linking = h.Devices(cfg)
	}
	dev.OnAccount = func(a channels.Account) {
		r.mu.Lock()
		r.account = &a
		r.mu.Unlock()
		h.changed(cfg)
	}
	r.serve = &Serve{
		Binding: cfg.Binding, Store: h.Store, NotifyTasks: cfg.NotifyTasks,
		Approvals: h.Approvals, AskInChat: cfg.AskInChat, ShowArguments: cfg.ShowArguments,
		NewAdapter: func() (Adapter, error) { return k.New(cfg.Binding, cfg.Link, dev) },
		Secrets:    []string{cfg.Link.Token},
		News:       r.news,
		Log:        h.Log.WithValues("channel", cfg.Namespace+"/"+cfg.Name),
		OnStatus:   func(st Status) { h.statusChanged(cfg, st) },
		OnPaired:   func() { h.changed(cfg) },
	}
	h.mu.Lock()
	if h.ctx == nil {
		h.mu.Unlock()
		cancel()
		return ErrNotLeading
	}
	h.running[cfg.Binding.UID] = r
	h.mu.Unlock()
	go func() {
		defer close(r.done)
		if err := r.serve.Run(ctx); err != nil && !errors.Is(err, channels.ErrNeedsRelink) {
			r.serve.Log.Error(err, "a channel's link stopped")
		}
	}()
	return nil
}

// Stop stops binding's link, if it runs, and waits for it.
func (h *Hub) Stop(binding string) {
	h.mu.Lock()
	r := h.running[binding]
	delete(h.running, binding)
	h.mu.Unlock()
	if r != nil {
		r.cancel()
		<-r.done
	}
}

// Status is binding's link's status, false when it does not run here.
func (h *Hub) Status(binding string) (Status, bool) {
	h.mu.Lock()
	r := h.running[binding]
	h.mu.Unlock()
	if r == nil {
		return Status{}, false
	}
	r.serve.mu.Lock()
	defer r.serve.mu.Unlock()
	return r.serve.last, true
}

// Account is the account binding's device reported it is linked to, false
// when it reported none (a kind linked by a token has its account checked
// before it is stored).
func (h *Hub) Account(binding string) (channels.Account, bool) {
	h.mu.Lock()
	r := h.running[binding]
	h.mu.Unlock()
	if r == nil {
		return channels.Account{}, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.account == nil {
		return channels.Account{}, false
	}
	return *r.account, true
}

// statusChanged logs a change of a link's status in its Dot's log, once,
// and wakes its Channel's controller.
func (h *Hub) statusChanged(cfg Config, st Status) {
	data, _ := json.Marshal(wire.ChannelStatus{Kind: cfg.Binding.Kind, Channel: cfg.Name, State: st.State, Detail: st.Detail})
	if _, err := h.Store.AppendEvents(context.Background(), store.Event{Dot: cfg.Binding.Dot, Type: wire.EventChannelStatus, Source: store.SourceHost, Data: data}); err != nil {
		h.Log.Error(err, "a channel's status is not in its Dot's log", "channel", cfg.Namespace+"/"+cfg.Name)
	}
	h.changed(cfg)
}

func (h *Hub) changed(cfg Config) {
	if h.Changed != nil {
		h.Changed(cfg.Namespace, cfg.Name)
	}
}
