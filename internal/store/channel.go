package store

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// A messaging channel's people and pairing codes (ref 9.8, migrations
// 0004_channels.sql), by the Channel's uid (its binding). The policies
// (who may pair, how a code is made) are internal/channels'; these are the
// rows.

// Peer is a person allowed to talk to a Dot through a channel.
type Peer struct {
	Binding string
	DotUID  string
	// ID is the channel's stable id of the person.
	ID string
	// Chat is their private chat with the channel's account.
	Chat string
	// Role is owner (gets the Dot's task endings and approval prompts) or
	// user.
	Role  string
	Label string
	At    time.Time
}

// Peer roles.
const (
	PeerOwner = "owner"
	PeerUser  = "user"
)

// ErrNoSuchPairingCode: the code was never made for this channel, has
// expired, or was used.
var ErrNoSuchPairingCode = errors.New("no such pairing code: it is wrong, expired (codes last 10 minutes) or was used")

// AddPairingCode keeps a code's hash for binding until expires.
func (s *Store) AddPairingCode(ctx context.Context, binding, dotUID string, hash [sha256.Size]byte, expires time.Time) error {
	if binding == "" || dotUID == "" {
		return errors.New("a pairing code needs its channel and Dot")
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO channel_pairings (binding_id, dot_uid, code_hash, expires_at) VALUES ($1, $2, $3, $4)`,
		binding, dotUID, hash[:], expires)
	if err != nil {
		return fmt.Errorf("store a pairing code of channel %s: %w", binding, err)
	}
	return nil
}

// Pair uses the code of hash, once, and pairs p through p.Binding in the
// same transaction: both happen or neither. A person paired before keeps
// their role and is moved to the chat they paired from now.
func (s *Store) Pair(ctx context.Context, hash [sha256.Size]byte, p Peer, now time.Time) (Peer, error) {
	if p.Binding == "" || p.DotUID == "" || p.ID == "" || p.Chat == "" {
		return Peer{}, errors.New("a pairing needs its channel, Dot, person and chat")
	}
	if p.Role == "" {
		p.Role = PeerOwner
	}
	err := s.InTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `
UPDATE channel_pairings SET consumed_at = $3
WHERE binding_id = $1 AND code_hash = $2 AND consumed_at IS NULL AND expires_at > $3`, p.Binding, hash[:], now)
		if err != nil {
			return fmt.Errorf("use a pairing code of channel %s: %w", p.Binding, err)
		}
		if tag.RowsAffected() != 1 {
			return ErrNoSuchPairingCode
		}
		return tx.QueryRow(ctx, `
INSERT INTO channel_peers (binding_id, dot_uid, peer_id, chat_id, role, label, created_at)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (binding_id, peer_id) DO UPDATE SET chat_id = EXCLUDED.chat_id, label = EXCLUDED.label
RETURNING role, created_at`, p.Binding, p.DotUID, p.ID, p.Chat, p.Role, p.Label, now).Scan(&p.Role, &p.At)
	})
	if err != nil {
		return Peer{}, err
	}
	return p, nil
}

// PeerOf is the person id paired through binding, false when they are not.
func (s *Store) PeerOf(ctx context.Context, binding, id string) (Peer, bool, error) {
	p := Peer{Binding: binding, ID: id}
	err := s.pool.QueryRow(ctx, `SELECT dot_uid, chat_id, role, label, created_at FROM channel_peers WHERE binding_id = $1 AND peer_id = $2`,
		binding, id).Scan(&p.DotUID, &p.Chat, &p.Role, &p.Label, &p.At)
	if errors.Is(err, pgx.ErrNoRows) {
		return Peer{}, false, nil
	}
	if err != nil {
		return Peer{}, false, fmt.Errorf("read person %s of channel %s: %w", id, binding, err)
	}
	return p, true, nil
}

// Peers are the people paired through binding, oldest first.
func (s *Store) Peers(ctx context.Context, binding string) ([]Peer, error) {
	rows, err := s.pool.Query(ctx, `SELECT dot_uid, peer_id, chat_id, role, label, created_at FROM channel_peers WHERE binding_id = $1 ORDER BY created_at, peer_id`, binding)
	if err != nil {
		return nil, fmt.Errorf("read the people of channel %s: %w", binding, err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Peer, error) {
		p := Peer{Binding: binding}
		err := r.Scan(&p.DotUID, &p.ID, &p.Chat, &p.Role, &p.Label, &p.At)
		return p, err
	})
}

// Unpair removes a person from binding; false when they were not paired.
func (s *Store) Unpair(ctx context.Context, binding, id string) (bool, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM channel_peers WHERE binding_id = $1 AND peer_id = $2`, binding, id)
	if err != nil {
		return false, fmt.Errorf("unpair person %s of channel %s: %w", id, binding, err)
	}
	return tag.RowsAffected() == 1, nil
}

// ForgetChannel removes every row of binding (the Channel is gone).
func (s *Store) ForgetChannel(ctx context.Context, binding string) error {
	return s.InTx(ctx, func(tx pgx.Tx) error {
		for _, table := range channelTables {
			if _, err := tx.Exec(ctx, "DELETE FROM "+table+" WHERE binding_id = $1", binding); err != nil {
				return fmt.Errorf("forget channel %s (%s): %w", binding, table, err)
			}
		}
		return nil
	})
}

// ChannelCursor is the id of the last event of the Dot the hub dealt with
// for binding; a binding seen for the first time starts after the Dot's
// latest event (its history is not replayed into a chat), which is stored.
func (s *Store) ChannelCursor(ctx context.Context, binding, dotUID string) (int64, error) {
	var cursor int64
	err := s.pool.QueryRow(ctx, `
INSERT INTO channel_cursors (binding_id, dot_uid, event_cursor)
VALUES ($1, $2, (SELECT coalesce(max(id), 0) FROM events WHERE dot_uid = $2))
ON CONFLICT (binding_id) DO UPDATE SET binding_id = EXCLUDED.binding_id
RETURNING event_cursor`, binding, dotUID).Scan(&cursor)
	if err != nil {
		return 0, fmt.Errorf("read where channel %s stands in its Dot's log: %w", binding, err)
	}
	return cursor, nil
}

// SetChannelCursor moves binding's cursor forward to id (never back).
func (s *Store) SetChannelCursor(ctx context.Context, binding string, id int64) error {
	if _, err := s.pool.Exec(ctx, `UPDATE channel_cursors SET event_cursor = greatest(event_cursor, $2) WHERE binding_id = $1`, binding, id); err != nil {
		return fmt.Errorf("move channel %s in its Dot's log: %w", binding, err)
	}
	return nil
}

// EventOf is the Dot's event of id, false when the Dot has none such.
func (s *Store) EventOf(ctx context.Context, dotUID string, id int64) (Event, bool, error) {
	e := Event{ID: id}
	var source string
	err := s.pool.QueryRow(ctx, `SELECT dot_namespace, dot_name, dot_uid, type, data, source, guest_seq, created_at FROM events WHERE dot_uid = $1 AND id = $2`,
		dotUID, id).Scan(&e.Dot.Namespace, &e.Dot.Name, &e.Dot.UID, &e.Type, &e.Data, &source, &e.GuestSeq, &e.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Event{}, false, nil
	}
	if err != nil {
		return Event{}, false, fmt.Errorf("read event %d of dot %s: %w", id, dotUID, err)
	}
	e.Source = Source(source)
	return e, true, nil
}

// channelTables are the tables of a channel's rows, which go with the
// Channel and with its Dot.
var channelTables = []string{"channel_peers", "channel_pairings", "channel_cursors", "channel_prompts"}

// Prompt is an approval prompt a channel sent to a person.
type Prompt struct {
	Binding    string
	DotUID     string
	ApprovalID string
	TaskID     string
	PeerID     string
	Chat       string
	// Ref is the channel's id of the sent message.
	Ref  string
	Body string
}

// AddPrompt records a prompt sent (again: the newer one counts).
func (s *Store) AddPrompt(ctx context.Context, p Prompt) error {
	_, err := s.pool.Exec(ctx, `
INSERT INTO channel_prompts (binding_id, dot_uid, approval_id, task_id, peer_id, chat_id, ref, body)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
ON CONFLICT (binding_id, approval_id, peer_id) DO UPDATE SET chat_id = EXCLUDED.chat_id, ref = EXCLUDED.ref, body = EXCLUDED.body, settled = false`,
		p.Binding, p.DotUID, p.ApprovalID, p.TaskID, p.PeerID, p.Chat, p.Ref, p.Body)
	if err != nil {
		return fmt.Errorf("record an approval prompt of channel %s: %w", p.Binding, err)
	}
	return nil
}

// OpenPrompts are binding's prompts not settled yet; approvalID or taskID,
// when not empty, narrow them to one approval's or one task's.
func (s *Store) OpenPrompts(ctx context.Context, binding, approvalID, taskID string) ([]Prompt, error) {
	return s.prompts(ctx, binding, `AND NOT settled AND ($2 = '' OR approval_id = $2) AND ($3 = '' OR task_id = $3)`, approvalID, taskID)
}

// HasPrompt says whether binding sent person a prompt for approvalID.
func (s *Store) HasPrompt(ctx context.Context, binding, approvalID, peerID string) (bool, error) {
	var n int
	err := s.pool.QueryRow(ctx, `SELECT count(*) FROM channel_prompts WHERE binding_id = $1 AND approval_id = $2 AND peer_id = $3`, binding, approvalID, peerID).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("read an approval prompt of channel %s: %w", binding, err)
	}
	return n > 0, nil
}

// SettlePrompt marks a prompt edited to its outcome.
func (s *Store) SettlePrompt(ctx context.Context, binding, approvalID, peerID string) error {
	if _, err := s.pool.Exec(ctx, `UPDATE channel_prompts SET settled = true WHERE binding_id = $1 AND approval_id = $2 AND peer_id = $3`, binding, approvalID, peerID); err != nil {
		return fmt.Errorf("settle an approval prompt of channel %s: %w", binding, err)
	}
	return nil
}

// Prompts are every prompt binding sent, settled or not.
func (s *Store) Prompts(ctx context.Context, binding string) ([]Prompt, error) {
	return s.prompts(ctx, binding, "")
}

// prompts reads binding's prompts that also match the condition and, in
// order, the arguments after the binding ($2 on).
func (s *Store) prompts(ctx context.Context, binding, condition string, args ...any) ([]Prompt, error) {
	rows, err := s.pool.Query(ctx, `
SELECT dot_uid, approval_id, task_id, peer_id, chat_id, ref, body FROM channel_prompts
WHERE binding_id = $1 `+condition+`
ORDER BY created_at, approval_id, peer_id`, append([]any{binding}, args...)...)
	if err != nil {
		return nil, fmt.Errorf("read the approval prompts of channel %s: %w", binding, err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Prompt, error) {
		p := Prompt{Binding: binding}
		err := r.Scan(&p.DotUID, &p.ApprovalID, &p.TaskID, &p.PeerID, &p.Chat, &p.Ref, &p.Body)
		return p, err
	})
}
