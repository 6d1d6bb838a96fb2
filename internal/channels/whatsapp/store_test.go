package main

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.mau.fi/whatsmeow/store"
	"go.mau.fi/whatsmeow/types"
	waLog "go.mau.fi/whatsmeow/util/log"

	"github.com/invisible-dots/invisible-dots/internal/channels/port"
)

// fakeServer is the server's side of saves: it records each save and
// keeps what it was given, or fails when told to.
type fakeServer struct {
	mu    sync.Mutex
	keys  port.Keys
	saves [][]port.KeyChange
	fail  error
}

func (f *fakeServer) save(_ context.Context, changes []port.KeyChange) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return f.fail
	}
	if f.keys == nil {
		f.keys = port.Keys{}
	}
	f.keys.Apply(changes)
	f.saves = append(f.saves, changes)
	return nil
}

func newTestStore(initial port.Keys) (*deviceStore, *fakeServer) {
	srv := &fakeServer{keys: initial.Clone()}
	return &deviceStore{kv: newKV(initial, srv.save)}, srv
}

func TestAWriteIsSavedBeforeMemoryTakesIt(t *testing.T) {
	ctx := context.Background()
	s, srv := newTestStore(nil)
	if err := s.PutSession(ctx, "4915111111111:0", []byte("ratchet")); err != nil {
		t.Fatal(err)
	}
	if got := srv.keys[groupSessions]["4915111111111:0"]; string(got) != "ratchet" {
		t.Errorf("the server has %q, want the session", got)
	}
	srv.fail = errors.New("the Secret could not be written")
	if err := s.PutSession(ctx, "4915111111111:0", []byte("next")); err == nil {
		t.Fatal("a write the server did not save returned nil")
	}
	if got, _ := s.GetSession(ctx, "4915111111111:0"); string(got) != "ratchet" {
		t.Errorf("after a failed save memory holds %q, want the saved session", got)
	}
}

func TestMemoryOnlyGroupsAreNeverSent(t *testing.T) {
	ctx := context.Background()
	s, srv := newTestStore(nil)
	jid := types.NewJID("4915111111111", types.DefaultUserServer)
	if _, _, err := s.PutPushName(ctx, jid, "Ana"); err != nil {
		t.Fatal(err)
	}
	if err := s.PutPinned(ctx, jid, true); err != nil {
		t.Fatal(err)
	}
	if err := s.PutMessageSecret(ctx, jid, jid, "ID", []byte("secret")); err != nil {
		t.Fatal(err)
	}
	if len(srv.saves) != 0 {
		t.Errorf("memory-only writes were sent to the server: %v", srv.saves)
	}
	if c, _ := s.GetContact(ctx, jid); c.PushName != "Ana" || !c.Found {
		t.Errorf("contact = %+v, want Ana", c)
	}
	if sec, _, _ := s.GetMessageSecret(ctx, jid, jid, "ID"); string(sec) != "secret" {
		t.Errorf("message secret = %q", sec)
	}
	// And keys given at hello for such a group are not taken.
	s2, _ := newTestStore(port.Keys{groupContacts: {"x": []byte("{}")}})
	if _, ok := s2.kv.get(ctx, groupContacts, "x"); ok {
		t.Error("a memory-only group was read from the server's keys")
	}
}

func TestADecryptionSavesItsWritesTogetherOrNotAtAll(t *testing.T) {
	ctx := context.Background()
	s, srv := newTestStore(port.Keys{groupSessions: {"a:0": []byte("old")}})
	boom := errors.New("bad MAC")
	err := s.DoDecryptionTxn(ctx, func(ctx context.Context) error {
		if err := s.PutSession(ctx, "a:0", []byte("new")); err != nil {
			return err
		}
		if got, _ := s.GetSession(ctx, "a:0"); string(got) != "new" {
			t.Errorf("inside the transaction the session is %q, want its own write", got)
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("DoDecryptionTxn = %v, want the decryption's error", err)
	}
	if got, _ := s.GetSession(ctx, "a:0"); string(got) != "old" || len(srv.saves) != 0 {
		t.Errorf("after a failed decryption: session %q, saves %d; want old and none", got, len(srv.saves))
	}
	err = s.DoDecryptionTxn(ctx, func(ctx context.Context) error {
		if err := s.PutSession(ctx, "a:0", []byte("new")); err != nil {
			return err
		}
		if err := s.PutIdentity(ctx, "a:0", [32]byte{1}); err != nil {
			return err
		}
		if len(srv.saves) != 0 {
			t.Error("a write inside the transaction was saved before it ended")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(srv.saves) != 1 || len(srv.saves[0]) != 2 {
		t.Errorf("saves = %v, want one save of both writes", srv.saves)
	}
}

func TestTheDeviceComesBackFromItsKeys(t *testing.T) {
	ctx := context.Background()
	s, srv := newTestStore(nil)
	dev, linked, err := newDevice(ctx, s, waLog.Noop)
	if err != nil || linked {
		t.Fatalf("a store without keys: linked %v, err %v; want a new device", linked, err)
	}
	if err := dev.Save(ctx); err == nil {
		t.Error("a device without a JID was saved")
	}
	id := types.NewADJID("4915100000000", 0, 7)
	dev.ID = &id
	dev.LID = types.NewJID("123456", types.HiddenUserServer)
	dev.PushName = "Dot"
	if err := dev.Save(ctx); err != nil {
		t.Fatal(err)
	}
	again, srv2 := newTestStore(srv.keys)
	dev2, linked, err := newDevice(ctx, again, waLog.Noop)
	if err != nil || !linked {
		t.Fatalf("from the saved keys: linked %v, err %v", linked, err)
	}
	type view struct {
		Noise, Identity, Signed [32]byte
		Sig                     [64]byte
		Reg                     uint32
		Adv                     []byte
		ID, LID                 types.JID
		Push                    string
	}
	v := func(d *store.Device) view {
		return view{*d.NoiseKey.Priv, *d.IdentityKey.Priv, *d.SignedPreKey.Priv, *d.SignedPreKey.Signature, d.RegistrationID, d.AdvSecretKey, *d.ID, d.LID, d.PushName}
	}
	if diff := cmp.Diff(v(dev), v(dev2)); diff != "" {
		t.Errorf("the device read back differs (-saved +read):\n%s", diff)
	}
	if *dev2.NoiseKey.Pub != *dev.NoiseKey.Pub {
		t.Error("the public key is not derived back")
	}
	// A logout forgets every key.
	if err := dev2.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	if len(srv2.keys) != 0 {
		groups := []string{}
		for g := range srv2.keys {
			groups = append(groups, g)
		}
		t.Errorf("after a logout the server keeps the groups %v", groups)
	}
}

func TestPreKeys(t *testing.T) {
	ctx := context.Background()
	s, srv := newTestStore(nil)
	ks, err := s.GetOrGenPreKeys(ctx, 3)
	if err != nil || len(ks) != 3 || ks[0].KeyID != 1 || ks[2].KeyID != 3 {
		t.Fatalf("GetOrGenPreKeys(3) = %v, %v", ks, err)
	}
	if len(srv.keys[groupPreKeys]) != 3 {
		t.Errorf("the server has %d prekeys, want 3", len(srv.keys[groupPreKeys]))
	}
	again, _ := s.GetOrGenPreKeys(ctx, 3)
	if again[0].KeyID != 1 || *again[0].Priv != *ks[0].Priv {
		t.Error("prekeys not uploaded yet are not given again")
	}
	if err := s.MarkPreKeysAsUploaded(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if n, _ := s.UploadedPreKeyCount(ctx); n != 2 {
		t.Errorf("uploaded = %d, want 2", n)
	}
	next, _ := s.GetOrGenPreKeys(ctx, 2)
	if next[0].KeyID != 3 || next[1].KeyID != 4 {
		t.Errorf("after upload the next prekeys are %d, %d; want 3, 4", next[0].KeyID, next[1].KeyID)
	}
	one, _ := s.GenOnePreKey(ctx)
	got, _ := s.GetPreKey(ctx, one.KeyID)
	if got == nil || *got.Pub != *one.Pub {
		t.Error("GenOnePreKey's key is not read back")
	}
	_ = s.RemovePreKey(ctx, one.KeyID)
	if got, _ := s.GetPreKey(ctx, one.KeyID); got != nil {
		t.Error("a removed prekey is still there")
	}
}

func TestIdentitiesSessionsAndTheLIDMigration(t *testing.T) {
	ctx := context.Background()
	s, srv := newTestStore(nil)
	pn := types.NewJID("4915111111111", types.DefaultUserServer)
	lid := types.NewJID("987654", types.HiddenUserServer)
	from, to := pn.SignalAddressUser(), lid.SignalAddressUser()
	_ = s.PutSession(ctx, from+":0", []byte("s0"))
	_ = s.PutSession(ctx, from+":3", []byte("s3"))
	_ = s.PutIdentity(ctx, from+":0", [32]byte{9})
	_ = s.PutSenderKey(ctx, "group@g.us", from+":0", []byte("sk"))
	if ok, _ := s.IsTrustedIdentity(ctx, from+":0", [32]byte{9}); !ok {
		t.Error("the saved identity is not trusted")
	}
	if ok, _ := s.IsTrustedIdentity(ctx, from+":0", [32]byte{8}); ok {
		t.Error("a changed identity is trusted")
	}
	if ok, _ := s.IsTrustedIdentity(ctx, "new:0", [32]byte{8}); !ok {
		t.Error("an identity not seen before is not trusted")
	}
	if err := s.MigratePNToLID(ctx, pn, lid); err != nil {
		t.Fatal(err)
	}
	want := port.Keys{
		groupSessions:   {to + ":0": []byte("s0"), to + ":3": []byte("s3")},
		groupIdentities: {to + ":0": (&[32]byte{9})[:]},
		groupSenderKeys: {"group@g.us|" + to + ":0": []byte("sk")},
	}
	if diff := cmp.Diff(want, srv.keys); diff != "" {
		t.Errorf("after the migration the server has (-want +got):\n%s", diff)
	}
	_ = s.DeleteAllSessions(ctx, to)
	if ok, _ := s.HasSession(ctx, to+":3"); ok {
		t.Error("DeleteAllSessions left a session")
	}

	if err := s.PutLIDMapping(ctx, lid, pn); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetPNForLID(ctx, lid); got != pn {
		t.Errorf("GetPNForLID = %v, want %v", got, pn)
	}
	if got, _ := s.GetLIDForPN(ctx, pn); got != lid {
		t.Errorf("GetLIDForPN = %v, want %v", got, lid)
	}
	newLID := types.NewJID("111", types.HiddenUserServer)
	_ = s.PutLIDMapping(ctx, newLID, pn)
	if got, _ := s.GetPNForLID(ctx, lid); !got.IsEmpty() {
		t.Errorf("the phone's old LID still maps to %v", got)
	}
	_ = s.PutPrivacyTokens(ctx, store.PrivacyToken{User: pn, Token: []byte("tc")})
	if tok, _ := s.GetPrivacyToken(ctx, newLID); tok == nil || string(tok.Token) != "tc" {
		t.Errorf("a privacy token is not found by the twin address: %+v", tok)
	}
}

func TestAppState(t *testing.T) {
	ctx := context.Background()
	s, _ := newTestStore(nil)
	hash := [128]byte{1, 2, 3}
	_ = s.PutAppStateVersion(ctx, "regular", 7, hash)
	if v, h, _ := s.GetAppStateVersion(ctx, "regular"); v != 7 || h != hash {
		t.Errorf("version = %d %v", v, h[:3])
	}
	_ = s.PutAppStateMutationMACs(ctx, "regular", 7, []store.AppStateMutationMAC{{IndexMAC: []byte{1}, ValueMAC: []byte{2}}})
	if m, _ := s.GetAppStateMutationMAC(ctx, "regular", []byte{1}); string(m) != string([]byte{2}) {
		t.Errorf("MAC = %v", m)
	}
	_ = s.DeleteAppStateVersion(ctx, "regular")
	if m, _ := s.GetAppStateMutationMAC(ctx, "regular", []byte{1}); m != nil {
		t.Error("a deleted version left its MACs")
	}
	_ = s.PutAppStateSyncKey(ctx, []byte{1}, store.AppStateSyncKey{Data: []byte("a"), Timestamp: 1})
	_ = s.PutAppStateSyncKey(ctx, []byte{2}, store.AppStateSyncKey{Data: []byte("b"), Timestamp: 5})
	if id, _ := s.GetLatestAppStateSyncKeyID(ctx); string(id) != string([]byte{2}) {
		t.Errorf("latest sync key = %v, want [2]", id)
	}
}
