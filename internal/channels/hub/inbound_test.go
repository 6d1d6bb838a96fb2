package hub

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/invisible-dots/invisible-dots/internal/channels"
	"github.com/invisible-dots/invisible-dots/internal/postgres"
	"github.com/invisible-dots/invisible-dots/internal/postgres/pgtest"
	"github.com/invisible-dots/invisible-dots/internal/store"
)

var testStore *store.Store

func TestMain(m *testing.M) {
	os.Exit(pgtest.Run(m, func(db *postgres.Instance) { testStore = store.New(db.Pool()) }))
}

// recordingReplier stands in for the adapter's sends at the edge of the
// test: it records what the hub said in which chat.
type recordingReplier struct {
	mu   sync.Mutex
	said []string
}

func (r *recordingReplier) SendText(_ context.Context, chat, text string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.said = append(r.said, chat+": "+text)
	return nil
}

var dotN int

func newInbound(t *testing.T) (*Inbound, *recordingReplier) {
	dotN++
	r := &recordingReplier{}
	return &Inbound{
		Binding: Binding{UID: fmt.Sprintf("chan-%d-%d", time.Now().UnixNano(), dotN), Kind: "telegram",
			Dot: store.Dot{Namespace: "default", Name: "helper", UID: fmt.Sprintf("dot-%d-%d", time.Now().UnixNano(), dotN)}},
		Store: testStore, Reply: r, Bucket: &channels.Bucket{}, Log: logr.Discard(),
	}, r
}

func msg(peer, chat string, private bool, id, text string) channels.Inbound {
	return channels.Inbound{Peer: peer, Chat: chat, Private: private, ExternalID: id, Text: text, HasText: text != "", Label: "Ada"}
}

func logged(t *testing.T, h *Inbound) []string {
	t.Helper()
	events, err := testStore.EventsAfter(context.Background(), h.Binding.Dot.UID, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range events {
		out = append(out, e.Type)
	}
	return out
}

func TestStrangersGroupsAndEmptiesCostNothing(t *testing.T) {
	ctx := context.Background()
	h, said := newInbound(t)
	for _, in := range []channels.Inbound{
		msg("66", "66", true, "777:1", "hello, who are you?"),
		msg("66", "66", true, "777:2", "/start"),
		msg("66", "66", true, "777:3", "/start 7K3M9QXA"), // no such code
		msg("42", "-100", false, "777:4", "/start 7K3M9QXA"),
		{Peer: "66", Chat: "66", Private: true, ExternalID: "777:5"}, // a photo
	} {
		if err := h.Inbound(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	if got := logged(t, h); len(got) != 0 {
		t.Errorf("a stranger's messages wrote %v", got)
	}
	if len(said.said) != 0 {
		t.Errorf("a stranger was answered: %v", said.said)
	}
}

func TestPairedPersonTalksToTheDotOnce(t *testing.T) {
	ctx := context.Background()
	h, said := newInbound(t)
	code, hash := channels.NewPairingCode()
	if err := testStore.AddPairingCode(ctx, h.Binding.UID, h.Binding.Dot.UID, hash, time.Now().Add(channels.PairingCodeLifetime)); err != nil {
		t.Fatal(err)
	}
	// Pairing from a group does nothing; from the private chat it pairs.
	if err := h.Inbound(ctx, msg("42", "-100", false, "777:1", "/start "+code)); err != nil {
		t.Fatal(err)
	}
	if err := h.Inbound(ctx, msg("42", "42", true, "777:2", "/start "+strings.ToLower(code))); err != nil {
		t.Fatal(err)
	}
	if p, ok, _ := testStore.PeerOf(ctx, h.Binding.UID, "42"); !ok || p.Chat != "42" || p.Role != store.PeerOwner {
		t.Fatalf("after /start CODE: %+v, %v; want an owner in chat 42", p, ok)
	}
	if len(said.said) != 1 || !strings.Contains(said.said[0], "Paired") || !strings.Contains(said.said[0], "not end-to-end encrypted") {
		t.Errorf("the welcome: %v", said.said)
	}

	// A message, then Telegram's redelivery of it: the Dot gets it once.
	for range 2 {
		if err := h.Inbound(ctx, msg("42", "42", true, "777:3", "  book the 9:40 train ")); err != nil {
			t.Fatal(err)
		}
	}
	// Not text, too long, empty: told, or dropped; nothing stored.
	_ = h.Inbound(ctx, channels.Inbound{Peer: "42", Chat: "42", Private: true, ExternalID: "777:4"})
	_ = h.Inbound(ctx, msg("42", "42", true, "777:5", strings.Repeat("x", channels.MaxInboundRunes+1)))
	_ = h.Inbound(ctx, msg("42", "42", true, "777:6", "   "))
	if got := strings.Join(logged(t, h), ","); got != "channel.peer.paired,message.user" {
		t.Errorf("the log: %s; want the pairing and the one message", got)
	}
	if len(said.said) != 3 || !strings.Contains(said.said[1], "Only text") || !strings.Contains(said.said[2], "too long") {
		t.Errorf("what the hub said: %v", said.said)
	}
	rows, _ := testStore.Pending(ctx, h.Binding.Dot.UID)
	if len(rows) != 1 || !strings.Contains(string(rows[0].Data), `"book the 9:40 train"`) {
		t.Errorf("the Dot is given %v; want the message once, trimmed", rows)
	}
}

func TestAPairedPersonIsHeldToTheBucket(t *testing.T) {
	ctx := context.Background()
	h, said := newInbound(t)
	code, hash := channels.NewPairingCode()
	_ = testStore.AddPairingCode(ctx, h.Binding.UID, h.Binding.Dot.UID, hash, time.Now().Add(time.Minute))
	now := time.Now()
	h.Now = func() time.Time { return now }
	_ = h.Inbound(ctx, msg("42", "42", true, "777:0", "/start "+code))
	for i := range 13 {
		if err := h.Inbound(ctx, msg("42", "42", true, fmt.Sprintf("777:%d", i+1), fmt.Sprintf("message %d", i+1))); err != nil {
			t.Fatal(err)
		}
	}
	rows, _ := testStore.Pending(ctx, h.Binding.Dot.UID)
	if len(rows) != channels.BucketBurst {
		t.Errorf("%d of 13 messages at once reached the Dot; want %d", len(rows), channels.BucketBurst)
	}
	slow := 0
	for _, s := range said.said {
		if strings.Contains(s, "Too many messages") {
			slow++
		}
	}
	if slow != 1 {
		t.Errorf("told to slow down %d times; want once: %v", slow, said.said)
	}
}
