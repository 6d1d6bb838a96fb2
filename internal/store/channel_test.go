package store

import (
	"context"
	"crypto/sha256"
	"errors"
	"testing"
	"time"
)

func TestPairingUsesACodeOnceWithinItsTime(t *testing.T) {
	ctx := context.Background()
	dot := newDot("paired")
	const binding = "chan-uid-1"
	now := time.Now().UTC().Truncate(time.Microsecond)
	code := sha256.Sum256([]byte("7K3M9QXA"))
	if err := testStore.AddPairingCode(ctx, binding, dot.UID, code, now.Add(10*time.Minute)); err != nil {
		t.Fatal(err)
	}
	ada := Peer{Binding: binding, DotUID: dot.UID, ID: "42", Chat: "42", Label: "Ada"}

	// Another channel's code, a wrong code, an expired code: refused, nobody paired.
	if _, err := testStore.Pair(ctx, code, Peer{Binding: "chan-uid-2", DotUID: dot.UID, ID: "42", Chat: "42"}, now); !errors.Is(err, ErrNoSuchPairingCode) {
		t.Errorf("a code used through another channel: %v", err)
	}
	if _, err := testStore.Pair(ctx, sha256.Sum256([]byte("WRONG000")), ada, now); !errors.Is(err, ErrNoSuchPairingCode) {
		t.Errorf("a wrong code: %v", err)
	}
	if _, err := testStore.Pair(ctx, code, ada, now.Add(11*time.Minute)); !errors.Is(err, ErrNoSuchPairingCode) {
		t.Errorf("a code after its 10 minutes: %v", err)
	}
	if _, ok, _ := testStore.PeerOf(ctx, binding, "42"); ok {
		t.Fatalf("a refused pairing paired the person")
	}

	p, err := testStore.Pair(ctx, code, ada, now)
	if err != nil || p.Role != PeerOwner {
		t.Fatalf("pairing: %+v, %v; want an owner", p, err)
	}
	// Used once: a second person with the same code is refused.
	if _, err := testStore.Pair(ctx, code, Peer{Binding: binding, DotUID: dot.UID, ID: "66", Chat: "66"}, now); !errors.Is(err, ErrNoSuchPairingCode) {
		t.Errorf("a code used twice: %v", err)
	}
	got, ok, err := testStore.PeerOf(ctx, binding, "42")
	if err != nil || !ok || got.Chat != "42" || got.Label != "Ada" || got.DotUID != dot.UID {
		t.Errorf("PeerOf = %+v, %v, %v", got, ok, err)
	}

	// Pairing again from another chat moves them there, role kept.
	code2 := sha256.Sum256([]byte("8K3M9QXB"))
	_ = testStore.AddPairingCode(ctx, binding, dot.UID, code2, now.Add(time.Minute))
	ada.Chat = "4242"
	if p, err := testStore.Pair(ctx, code2, ada, now); err != nil || p.Chat != "4242" {
		t.Errorf("pairing again: %+v, %v", p, err)
	}
	peers, err := testStore.Peers(ctx, binding)
	if err != nil || len(peers) != 1 || peers[0].Chat != "4242" {
		t.Errorf("Peers = %+v, %v; want Ada once, in her new chat", peers, err)
	}

	if ok, err := testStore.Unpair(ctx, binding, "42"); !ok || err != nil {
		t.Errorf("Unpair = %v, %v", ok, err)
	}
	if _, ok, _ := testStore.PeerOf(ctx, binding, "42"); ok {
		t.Errorf("an unpaired person is still paired")
	}

	// A Dot's deletion takes its channels' rows.
	code3 := sha256.Sum256([]byte("9K3M9QXC"))
	_ = testStore.AddPairingCode(ctx, binding, dot.UID, code3, now.Add(time.Minute))
	_, _ = testStore.Pair(ctx, code3, ada, now)
	if err := testStore.DeleteDot(ctx, dot.UID); err != nil {
		t.Fatal(err)
	}
	if peers, _ := testStore.Peers(ctx, binding); len(peers) != 0 {
		t.Errorf("people of a deleted Dot's channel: %+v", peers)
	}
}
