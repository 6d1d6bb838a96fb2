package main

import (
	"context"
	"maps"
	"sort"
	"strings"
	"sync"

	"github.com/invisible-dots/invisible-dots/internal/channels/port"
)

// Saver writes changes of the device's state where they outlive the
// program (the server, over the socket) and returns once they are saved.
type Saver func(ctx context.Context, changes []port.KeyChange) error

// kv is the device's state in memory, by group and key. A write to a
// durable group is saved first and applied after: a failed save leaves
// memory as it was, so what whatsmeow goes on from is what the server
// has. Groups in memoryOnly are never sent (what the program can learn
// again, or needs only while it runs).
type kv struct {
	save Saver

	// writeMu orders writes: the server gets them in the order memory
	// takes them.
	writeMu sync.Mutex
	mu      sync.RWMutex
	groups  map[string]map[string][]byte
}

// The groups of the device's state. A group's name is part of the
// protocol's keys frames, and of the Secret the server keeps.
const (
	groupDevice        = "device"
	groupIdentities    = "identities"
	groupSessions      = "sessions"
	groupPreKeys       = "prekeys"
	groupSenderKeys    = "sender-keys"
	groupAppStateKeys  = "app-state-sync-keys"
	groupAppStateVers  = "app-state-versions"
	groupAppStateMACs  = "app-state-macs"
	groupLIDs          = "lid-map"
	groupPrivacyTokens = "privacy-tokens"

	groupContacts     = "contacts"
	groupChatSettings = "chat-settings"
	groupMsgSecrets   = "message-secrets"
	groupEventBuffer  = "event-buffer"
)

// durableGroups are the groups kept by the server; the others live in the
// program's memory only (contacts and push names, chat settings, message
// secrets of reactions and polls, the decryption buffer).
var durableGroups = []string{
	groupDevice, groupIdentities, groupSessions, groupPreKeys, groupSenderKeys,
	groupAppStateKeys, groupAppStateVers, groupAppStateMACs, groupLIDs, groupPrivacyTokens,
}

func durable(group string) bool {
	for _, g := range durableGroups {
		if g == group {
			return true
		}
	}
	return false
}

func newKV(initial port.Keys, save Saver) *kv {
	s := &kv{save: save, groups: map[string]map[string][]byte{}}
	for g, m := range initial {
		if durable(g) {
			s.groups[g] = maps.Clone(m)
		}
	}
	return s
}

// txKey marks a context inside DoDecryptionTxn.
type txKey struct{}

// tx collects a decryption's writes: read back inside it, saved together
// when it succeeds, dropped when it fails (as sqlstore's transaction).
type tx struct {
	changes []port.KeyChange
}

func (t *tx) lookup(group, key string) (value []byte, found, deleted bool) {
	for i := len(t.changes) - 1; i >= 0; i-- {
		c := t.changes[i]
		if c.Group != group {
			continue
		}
		if c.Key == "" && c.Value == nil {
			return nil, false, true
		}
		if c.Key == key {
			return c.Value, c.Value != nil, c.Value == nil
		}
	}
	return nil, false, false
}

func txOf(ctx context.Context) *tx {
	t, _ := ctx.Value(txKey{}).(*tx)
	return t
}

func (s *kv) get(ctx context.Context, group, key string) ([]byte, bool) {
	if t := txOf(ctx); t != nil {
		if v, found, deleted := t.lookup(group, key); found || deleted {
			return v, found
		}
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	v, ok := s.groups[group][key]
	return v, ok
}

// scan is a copy of group, the open transaction's writes applied.
func (s *kv) scan(ctx context.Context, group string) map[string][]byte {
	s.mu.RLock()
	out := maps.Clone(s.groups[group])
	s.mu.RUnlock()
	if out == nil {
		out = map[string][]byte{}
	}
	if t := txOf(ctx); t != nil {
		for _, c := range t.changes {
			if c.Group != group {
				continue
			}
			switch {
			case c.Key == "" && c.Value == nil:
				clear(out)
			case c.Value == nil:
				delete(out, c.Key)
			default:
				out[c.Key] = c.Value
			}
		}
	}
	return out
}

// keysWithPrefix are group's keys that start with prefix, sorted.
func (s *kv) keysWithPrefix(ctx context.Context, group, prefix string) []string {
	var out []string
	for k := range s.scan(ctx, group) {
		if strings.HasPrefix(k, prefix) {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// put writes changes: into the open transaction, or saved (durable
// groups) and then applied.
func (s *kv) put(ctx context.Context, changes ...port.KeyChange) error {
	if len(changes) == 0 {
		return nil
	}
	if t := txOf(ctx); t != nil {
		t.changes = append(t.changes, changes...)
		return nil
	}
	return s.commit(ctx, changes)
}

func (s *kv) commit(ctx context.Context, changes []port.KeyChange) error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	var send []port.KeyChange
	for _, c := range changes {
		if durable(c.Group) {
			send = append(send, c)
		}
	}
	if len(send) > 0 {
		if err := s.save(ctx, send); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	port.Keys(s.groups).Apply(changes)
	return nil
}

// inTx runs fn with its writes held until it succeeds; a transaction
// inside one is the outer one.
func (s *kv) inTx(ctx context.Context, fn func(context.Context) error) error {
	if txOf(ctx) != nil {
		return fn(ctx)
	}
	t := &tx{}
	if err := fn(context.WithValue(ctx, txKey{}, t)); err != nil {
		return err
	}
	return s.commit(ctx, t.changes)
}

// snapshot is a copy of the durable groups (for tests and the hello's
// clearing of a device never linked).
func (s *kv) snapshot() port.Keys {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return port.Keys(s.groups).Clone()
}
