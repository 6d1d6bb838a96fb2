package main

import (
	"context"
	"testing"

	"go.mau.fi/libsignal/ecc"
	"go.mau.fi/libsignal/keys/identity"
	"go.mau.fi/libsignal/keys/prekey"
	"go.mau.fi/libsignal/protocol"
	signalsession "go.mau.fi/libsignal/session"
	"go.mau.fi/libsignal/util/optional"
	"go.mau.fi/whatsmeow/store"
	"go.mau.fi/whatsmeow/types"
	waLog "go.mau.fi/whatsmeow/util/log"
)

// TestTheStoreCarriesRealSignalSessions runs the Signal library whatsmeow
// uses on two devices kept by this program's store: a first message over a
// prekey, an answer, and a message decrypted after the receiver started
// again from the keys its server saved. It proves the store holds what the
// library needs, the way whatsmeow uses it (a decryption in a transaction),
// without WhatsApp.
func TestTheStoreCarriesRealSignalSessions(t *testing.T) {
	ctx := context.Background()
	ser := store.SignalProtobufSerializer
	aliceStore, _ := newTestStore(nil)
	bobStore, bobServer := newTestStore(nil)
	alice, _, _ := newDevice(ctx, aliceStore, waLog.Noop)
	bob, _, _ := newDevice(ctx, bobStore, waLog.Noop)
	aliceAddr := protocol.NewSignalAddress("4915111111111", 0)
	bobAddr := protocol.NewSignalAddress("4915100000000", 0)

	// Bob's bundle, as WhatsApp would hand it to Alice.
	pre, err := bob.PreKeys.GetOrGenPreKeys(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	bundle := prekey.NewBundle(bob.RegistrationID, 0, optional.NewOptionalUint32(pre[0].KeyID), bob.SignedPreKey.KeyID,
		ecc.NewDjbECPublicKey(*pre[0].Pub), ecc.NewDjbECPublicKey(*bob.SignedPreKey.Pub), *bob.SignedPreKey.Signature,
		identity.NewKey(ecc.NewDjbECPublicKey(*bob.IdentityKey.Pub)))
	toBob := signalsession.NewBuilderFromSignal(alice, bobAddr, ser)
	if err := toBob.ProcessBundle(ctx, bundle); err != nil {
		t.Fatalf("Alice's session from Bob's bundle: %v", err)
	}
	aliceCipher := signalsession.NewCipher(toBob, bobAddr)
	first, err := aliceCipher.Encrypt(ctx, []byte("hello"))
	if err != nil {
		t.Fatal(err)
	}

	decryptFirst := func(dev *store.Device, msg protocol.CiphertextMessage) string {
		t.Helper()
		pkm, err := protocol.NewPreKeySignalMessageFromBytes(msg.Serialize(), ser.PreKeySignalMessage, ser.SignalMessage)
		if err != nil {
			t.Fatal(err)
		}
		var plain []byte
		err = dev.EventBuffer.DoDecryptionTxn(ctx, func(ctx context.Context) error {
			var err error
			plain, err = signalsession.NewCipher(signalsession.NewBuilderFromSignal(dev, aliceAddr, ser), aliceAddr).DecryptMessage(ctx, pkm)
			return err
		})
		if err != nil {
			t.Fatalf("Bob's decryption of a prekey message: %v", err)
		}
		return string(plain)
	}
	if got := decryptFirst(bob, first); got != "hello" {
		t.Fatalf("Bob read %q", got)
	}
	if _, ok := bobServer.keys[groupPreKeys][preKeyName(pre[0].KeyID)]; ok {
		t.Error("the one-time prekey used is still on the server")
	}
	if len(bobServer.keys[groupSessions]) != 1 || len(bobServer.keys[groupIdentities]) != 1 {
		t.Errorf("Bob's server has %d sessions and %d identities, want Alice's one of each",
			len(bobServer.keys[groupSessions]), len(bobServer.keys[groupIdentities]))
	}

	// Bob answers; Alice reads it over the session now established.
	bobCipher := signalsession.NewCipher(signalsession.NewBuilderFromSignal(bob, aliceAddr, ser), aliceAddr)
	answer, err := bobCipher.Encrypt(ctx, []byte("hi Alice"))
	if err != nil {
		t.Fatal(err)
	}
	sm, err := protocol.NewSignalMessageFromBytes(answer.Serialize(), ser.SignalMessage)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := aliceCipher.Decrypt(ctx, sm)
	if err != nil || string(plain) != "hi Alice" {
		t.Fatalf("Alice read %q, %v", plain, err)
	}

	// Bob's device (linked: whatsmeow saves it with its JID) starts again
	// from what his server saved.
	jid := types.NewADJID("4915100000000", 0, 7)
	bob.ID = &jid
	if err := bob.Save(ctx); err != nil {
		t.Fatal(err)
	}
	again, _ := newTestStore(bobServer.keys)
	bob2, linked, err := newDevice(ctx, again, waLog.Noop)
	if err != nil || !linked {
		t.Fatalf("Bob from his saved keys: linked %v, %v", linked, err)
	}
	next, err := aliceCipher.Encrypt(ctx, []byte("still there?"))
	if err != nil {
		t.Fatal(err)
	}
	sm2, err := protocol.NewSignalMessageFromBytes(next.Serialize(), ser.SignalMessage)
	if err != nil {
		t.Fatal(err)
	}
	var got []byte
	err = bob2.EventBuffer.DoDecryptionTxn(ctx, func(ctx context.Context) error {
		var err error
		got, err = signalsession.NewCipher(signalsession.NewBuilderFromSignal(bob2, aliceAddr, ser), aliceAddr).Decrypt(ctx, sm2)
		return err
	})
	if err != nil || string(got) != "still there?" {
		t.Fatalf("Bob, started again from the saved keys, read %q, %v", got, err)
	}
}
