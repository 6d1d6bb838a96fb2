package main

import (
	"context"
	cryptorand "crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"go.mau.fi/whatsmeow/proto/waAdv"
	"go.mau.fi/whatsmeow/store"
	"go.mau.fi/whatsmeow/types"
	"go.mau.fi/whatsmeow/util/keys"
	waLog "go.mau.fi/whatsmeow/util/log"
	"google.golang.org/protobuf/proto"

	"github.com/invisible-dots/invisible-dots/internal/channels/port"
)

// deviceStore is whatsmeow's store of one device over kv: every store
// interface of store.Device, the device itself (DeviceContainer) and the
// global LID map, in memory, each write of a durable group saved by the
// server before it returns. Never whatsmeow's sqlstore, never a file: the
// keys are an account takeover if they leak, and the server keeps them
// encrypted in a Secret the Channel owns.
type deviceStore struct {
	kv *kv
	// preKeyMu makes prekey generation one at a time (ids are max+1).
	preKeyMu sync.Mutex
}

var (
	_ store.AllStores       = (*deviceStore)(nil)
	_ store.DeviceContainer = (*deviceStore)(nil)
)

// savedDevice is the device's own keys and identity as the "device" group
// keeps them.
type savedDevice struct {
	NoisePriv      []byte    `json:"noise_priv"`
	IdentityPriv   []byte    `json:"identity_priv"`
	SignedPreKeyID uint32    `json:"signed_prekey_id"`
	SignedPreKey   []byte    `json:"signed_prekey_priv"`
	SignedPreSig   []byte    `json:"signed_prekey_sig"`
	RegistrationID uint32    `json:"registration_id"`
	AdvSecretKey   []byte    `json:"adv_secret_key"`
	ID             string    `json:"id,omitempty"`
	LID            string    `json:"lid,omitempty"`
	Account        []byte    `json:"account,omitempty"`
	Platform       string    `json:"platform,omitempty"`
	BusinessName   string    `json:"business_name,omitempty"`
	PushName       string    `json:"push_name,omitempty"`
	LIDMigrationTS int64     `json:"lid_migration_ts,omitempty"`
	FacebookUUID   uuid.UUID `json:"facebook_uuid,omitzero"`
}

const deviceKey = "device"

// errNoDeviceID: whatsmeow saves a device once it knows its JID (after
// the link), as sqlstore does.
var errNoDeviceID = errors.New("the device's JID must be known before it is saved")

// newDevice is the device the keys hold, or a new one to link when they
// hold none (linked says which).
func newDevice(ctx context.Context, s *deviceStore, log waLog.Logger) (dev *store.Device, linked bool, err error) {
	dev = &store.Device{Log: log, Container: s}
	dev.Identities, dev.Sessions, dev.PreKeys, dev.SenderKeys = s, s, s, s
	dev.AppStateKeys, dev.AppState, dev.Contacts, dev.ChatSettings = s, s, s, s
	dev.MsgSecrets, dev.PrivacyTokens, dev.EventBuffer, dev.LIDs = s, s, s, s
	raw, ok := s.kv.get(ctx, groupDevice, deviceKey)
	if !ok {
		dev.NoiseKey = keys.NewKeyPair()
		dev.IdentityKey = keys.NewKeyPair()
		dev.RegistrationID = rand.Uint32()
		dev.AdvSecretKey = randomBytes(32)
		dev.SignedPreKey = dev.IdentityKey.CreateSignedPreKey(1)
		return dev, false, nil
	}
	var d savedDevice
	if err := json.Unmarshal(raw, &d); err != nil {
		return nil, false, errors.New("the device's saved keys cannot be read: link the channel again")
	}
	if len(d.NoisePriv) != 32 || len(d.IdentityPriv) != 32 || len(d.SignedPreKey) != 32 || len(d.SignedPreSig) != 64 {
		return nil, false, errors.New("the device's saved keys are not whole: link the channel again")
	}
	dev.NoiseKey = keys.NewKeyPairFromPrivateKey([32]byte(d.NoisePriv))
	dev.IdentityKey = keys.NewKeyPairFromPrivateKey([32]byte(d.IdentityPriv))
	sig := [64]byte(d.SignedPreSig)
	dev.SignedPreKey = &keys.PreKey{KeyPair: *keys.NewKeyPairFromPrivateKey([32]byte(d.SignedPreKey)), KeyID: d.SignedPreKeyID, Signature: &sig}
	dev.RegistrationID = d.RegistrationID
	dev.AdvSecretKey = d.AdvSecretKey
	if d.ID != "" {
		id, err := types.ParseJID(d.ID)
		if err != nil {
			return nil, false, errors.New("the device's saved id cannot be read: link the channel again")
		}
		dev.ID = &id
	}
	if d.LID != "" {
		dev.LID, _ = types.ParseJID(d.LID)
	}
	if len(d.Account) > 0 {
		dev.Account = &waAdv.ADVSignedDeviceIdentity{}
		if err := proto.Unmarshal(d.Account, dev.Account); err != nil {
			return nil, false, errors.New("the device's saved account cannot be read: link the channel again")
		}
	}
	dev.Platform, dev.BusinessName, dev.PushName = d.Platform, d.BusinessName, d.PushName
	dev.LIDMigrationTimestamp = d.LIDMigrationTS
	dev.FacebookUUID = d.FacebookUUID
	dev.Initialized = true
	return dev, dev.ID != nil, nil
}

// PutDevice saves the device's own keys and identity.
func (s *deviceStore) PutDevice(ctx context.Context, dev *store.Device) error {
	if dev.ID == nil {
		return errNoDeviceID
	}
	d := savedDevice{
		NoisePriv: dev.NoiseKey.Priv[:], IdentityPriv: dev.IdentityKey.Priv[:],
		SignedPreKeyID: dev.SignedPreKey.KeyID, SignedPreKey: dev.SignedPreKey.Priv[:], SignedPreSig: dev.SignedPreKey.Signature[:],
		RegistrationID: dev.RegistrationID, AdvSecretKey: dev.AdvSecretKey,
		ID: dev.ID.String(), Platform: dev.Platform, BusinessName: dev.BusinessName, PushName: dev.PushName,
		LIDMigrationTS: dev.LIDMigrationTimestamp, FacebookUUID: dev.FacebookUUID,
	}
	if !dev.LID.IsEmpty() {
		d.LID = dev.LID.String()
	}
	if dev.Account != nil {
		b, err := proto.Marshal(dev.Account)
		if err != nil {
			return fmt.Errorf("encoding the device's account: %w", err)
		}
		d.Account = b
	}
	b, err := json.Marshal(d)
	if err != nil {
		return err
	}
	if err := s.kv.put(ctx, port.KeyChange{Group: groupDevice, Key: deviceKey, Value: b}); err != nil {
		return err
	}
	dev.Initialized = true
	return nil
}

// DeleteDevice forgets every key of the device (it was logged out: they
// are worth nothing now, and a leak of them is still a leak).
func (s *deviceStore) DeleteDevice(ctx context.Context, _ *store.Device) error {
	var changes []port.KeyChange
	for _, g := range durableGroups {
		changes = append(changes, port.KeyChange{Group: g})
	}
	for _, g := range []string{groupContacts, groupChatSettings, groupMsgSecrets, groupEventBuffer} {
		changes = append(changes, port.KeyChange{Group: g})
	}
	return s.kv.put(ctx, changes...)
}

// randomBytes are n bytes from the system's CSPRNG (the device's secret).
func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = cryptorand.Read(b) // never fails on Linux (crypto/rand's contract)
	return b
}

// ---- identities and sessions (Signal) ----

func (s *deviceStore) PutIdentity(ctx context.Context, address string, key [32]byte) error {
	return s.kv.put(ctx, port.KeyChange{Group: groupIdentities, Key: address, Value: key[:]})
}

func (s *deviceStore) DeleteAllIdentities(ctx context.Context, phone string) error {
	return s.deletePrefix(ctx, groupIdentities, phone+":")
}

func (s *deviceStore) DeleteIdentity(ctx context.Context, address string) error {
	return s.kv.put(ctx, port.KeyChange{Group: groupIdentities, Key: address})
}

// IsTrustedIdentity trusts a peer not seen before (its key is saved next)
// and one whose key is the one saved, as sqlstore does.
func (s *deviceStore) IsTrustedIdentity(ctx context.Context, address string, key [32]byte) (bool, error) {
	v, ok := s.kv.get(ctx, groupIdentities, address)
	if !ok {
		return true, nil
	}
	if len(v) != 32 {
		return false, errors.New("a saved identity key is not 32 bytes")
	}
	return [32]byte(v) == key, nil
}

func (s *deviceStore) GetSession(ctx context.Context, address string) ([]byte, error) {
	v, _ := s.kv.get(ctx, groupSessions, address)
	return v, nil
}

func (s *deviceStore) HasSession(ctx context.Context, address string) (bool, error) {
	_, ok := s.kv.get(ctx, groupSessions, address)
	return ok, nil
}

func (s *deviceStore) GetManySessions(ctx context.Context, addresses []string) (map[string][]byte, error) {
	out := make(map[string][]byte, len(addresses))
	for _, a := range addresses {
		v, _ := s.kv.get(ctx, groupSessions, a)
		out[a] = v
	}
	return out, nil
}

func (s *deviceStore) PutSession(ctx context.Context, address string, session []byte) error {
	return s.kv.put(ctx, port.KeyChange{Group: groupSessions, Key: address, Value: session})
}

func (s *deviceStore) PutManySessions(ctx context.Context, sessions map[string][]byte) error {
	changes := make([]port.KeyChange, 0, len(sessions))
	for a, v := range sessions {
		changes = append(changes, port.KeyChange{Group: groupSessions, Key: a, Value: v})
	}
	return s.kv.put(ctx, changes...)
}

func (s *deviceStore) DeleteAllSessions(ctx context.Context, phone string) error {
	return s.deletePrefix(ctx, groupSessions, phone+":")
}

func (s *deviceStore) DeleteSession(ctx context.Context, address string) error {
	return s.kv.put(ctx, port.KeyChange{Group: groupSessions, Key: address})
}

func (s *deviceStore) deletePrefix(ctx context.Context, group, prefix string) error {
	var changes []port.KeyChange
	for _, k := range s.kv.keysWithPrefix(ctx, group, prefix) {
		changes = append(changes, port.KeyChange{Group: group, Key: k})
	}
	return s.kv.put(ctx, changes...)
}

// MigratePNToLID moves a peer's sessions, identity keys and sender keys
// from its phone address to its LID in one save, as sqlstore does.
func (s *deviceStore) MigratePNToLID(ctx context.Context, pn, lid types.JID) error {
	from, to := pn.SignalAddressUser(), lid.SignalAddressUser()
	var changes []port.KeyChange
	move := func(group string, rename func(k string) (string, bool)) {
		for k, v := range s.kv.scan(ctx, group) {
			if nk, ok := rename(k); ok {
				changes = append(changes, port.KeyChange{Group: group, Key: nk, Value: v}, port.KeyChange{Group: group, Key: k})
			}
		}
	}
	byAddress := func(k string) (string, bool) {
		if strings.HasPrefix(k, from+":") {
			return to + strings.TrimPrefix(k, from), true
		}
		return "", false
	}
	move(groupSessions, byAddress)
	move(groupIdentities, byAddress)
	move(groupSenderKeys, func(k string) (string, bool) {
		chat, sender, ok := strings.Cut(k, "|")
		if ok && strings.HasPrefix(sender, from+":") {
			return chat + "|" + to + strings.TrimPrefix(sender, from), true
		}
		return "", false
	})
	return s.kv.put(ctx, changes...)
}

// ---- prekeys ----

type savedPreKey struct {
	Priv     []byte `json:"priv"`
	Uploaded bool   `json:"uploaded,omitempty"`
}

func preKeyName(id uint32) string { return strconv.FormatUint(uint64(id), 10) }

func (s *deviceStore) preKeys(ctx context.Context) map[uint32]savedPreKey {
	out := map[uint32]savedPreKey{}
	for k, v := range s.kv.scan(ctx, groupPreKeys) {
		id, err := strconv.ParseUint(k, 10, 32)
		var p savedPreKey
		if err != nil || json.Unmarshal(v, &p) != nil || len(p.Priv) != 32 {
			continue
		}
		out[uint32(id)] = p
	}
	return out
}

func (s *deviceStore) nextPreKeyID(ctx context.Context) uint32 {
	var last uint32
	for id := range s.preKeys(ctx) {
		last = max(last, id)
	}
	return last + 1
}

func (s *deviceStore) putPreKey(ctx context.Context, k *keys.PreKey, uploaded bool) port.KeyChange {
	b, _ := json.Marshal(savedPreKey{Priv: k.Priv[:], Uploaded: uploaded})
	return port.KeyChange{Group: groupPreKeys, Key: preKeyName(k.KeyID), Value: b}
}

func (s *deviceStore) GetOrGenPreKeys(ctx context.Context, count uint32) ([]*keys.PreKey, error) {
	s.preKeyMu.Lock()
	defer s.preKeyMu.Unlock()
	all := s.preKeys(ctx)
	var ids []uint32
	for id, p := range all {
		if !p.Uploaded {
			ids = append(ids, id)
		}
	}
	sortUint32(ids)
	out := make([]*keys.PreKey, 0, count)
	for _, id := range ids {
		if uint32(len(out)) == count {
			break
		}
		out = append(out, &keys.PreKey{KeyPair: *keys.NewKeyPairFromPrivateKey([32]byte(all[id].Priv)), KeyID: id})
	}
	next := s.nextPreKeyID(ctx)
	var changes []port.KeyChange
	for uint32(len(out)) < count {
		k := keys.NewPreKey(next)
		next++
		out = append(out, k)
		changes = append(changes, s.putPreKey(ctx, k, false))
	}
	if err := s.kv.put(ctx, changes...); err != nil {
		return nil, fmt.Errorf("saving new prekeys: %w", err)
	}
	return out, nil
}

func (s *deviceStore) GenOnePreKey(ctx context.Context) (*keys.PreKey, error) {
	s.preKeyMu.Lock()
	defer s.preKeyMu.Unlock()
	k := keys.NewPreKey(s.nextPreKeyID(ctx))
	if err := s.kv.put(ctx, s.putPreKey(ctx, k, true)); err != nil {
		return nil, err
	}
	return k, nil
}

func (s *deviceStore) GetPreKey(ctx context.Context, id uint32) (*keys.PreKey, error) {
	v, ok := s.kv.get(ctx, groupPreKeys, preKeyName(id))
	if !ok {
		return nil, nil
	}
	var p savedPreKey
	if json.Unmarshal(v, &p) != nil || len(p.Priv) != 32 {
		return nil, fmt.Errorf("prekey %d is not readable", id)
	}
	return &keys.PreKey{KeyPair: *keys.NewKeyPairFromPrivateKey([32]byte(p.Priv)), KeyID: id}, nil
}

func (s *deviceStore) RemovePreKey(ctx context.Context, id uint32) error {
	return s.kv.put(ctx, port.KeyChange{Group: groupPreKeys, Key: preKeyName(id)})
}

func (s *deviceStore) MarkPreKeysAsUploaded(ctx context.Context, upToID uint32) error {
	s.preKeyMu.Lock()
	defer s.preKeyMu.Unlock()
	var changes []port.KeyChange
	for id, p := range s.preKeys(ctx) {
		if id <= upToID && !p.Uploaded {
			p.Uploaded = true
			b, _ := json.Marshal(p)
			changes = append(changes, port.KeyChange{Group: groupPreKeys, Key: preKeyName(id), Value: b})
		}
	}
	return s.kv.put(ctx, changes...)
}

func (s *deviceStore) UploadedPreKeyCount(ctx context.Context) (int, error) {
	n := 0
	for _, p := range s.preKeys(ctx) {
		if p.Uploaded {
			n++
		}
	}
	return n, nil
}

func sortUint32(ids []uint32) {
	for i := 1; i < len(ids); i++ {
		for j := i; j > 0 && ids[j] < ids[j-1]; j-- {
			ids[j], ids[j-1] = ids[j-1], ids[j]
		}
	}
}

// ---- sender keys (groups: none are read, but whatsmeow may keep them) ----

func (s *deviceStore) PutSenderKey(ctx context.Context, group, user string, session []byte) error {
	return s.kv.put(ctx, port.KeyChange{Group: groupSenderKeys, Key: group + "|" + user, Value: session})
}

func (s *deviceStore) GetSenderKey(ctx context.Context, group, user string) ([]byte, error) {
	v, _ := s.kv.get(ctx, groupSenderKeys, group+"|"+user)
	return v, nil
}

// ---- app state ----

type savedSyncKey struct {
	Data        []byte `json:"data"`
	Fingerprint []byte `json:"fingerprint,omitempty"`
	Timestamp   int64  `json:"timestamp"`
}

func (s *deviceStore) PutAppStateSyncKey(ctx context.Context, id []byte, key store.AppStateSyncKey) error {
	b, _ := json.Marshal(savedSyncKey{Data: key.Data, Fingerprint: key.Fingerprint, Timestamp: key.Timestamp})
	return s.kv.put(ctx, port.KeyChange{Group: groupAppStateKeys, Key: hex.EncodeToString(id), Value: b})
}

func (s *deviceStore) GetAppStateSyncKey(ctx context.Context, id []byte) (*store.AppStateSyncKey, error) {
	v, ok := s.kv.get(ctx, groupAppStateKeys, hex.EncodeToString(id))
	if !ok {
		return nil, nil
	}
	var k savedSyncKey
	if err := json.Unmarshal(v, &k); err != nil {
		return nil, errors.New("an app state sync key is not readable")
	}
	return &store.AppStateSyncKey{Data: k.Data, Fingerprint: k.Fingerprint, Timestamp: k.Timestamp}, nil
}

func (s *deviceStore) GetLatestAppStateSyncKeyID(ctx context.Context) ([]byte, error) {
	var latest []byte
	var at int64
	for id, v := range s.kv.scan(ctx, groupAppStateKeys) {
		var k savedSyncKey
		if json.Unmarshal(v, &k) != nil {
			continue
		}
		if b, err := hex.DecodeString(id); err == nil && (latest == nil || k.Timestamp > at) {
			latest, at = b, k.Timestamp
		}
	}
	return latest, nil
}

type savedVersion struct {
	Version uint64 `json:"version"`
	Hash    []byte `json:"hash"`
}

func (s *deviceStore) PutAppStateVersion(ctx context.Context, name string, version uint64, hash [128]byte) error {
	b, _ := json.Marshal(savedVersion{Version: version, Hash: hash[:]})
	return s.kv.put(ctx, port.KeyChange{Group: groupAppStateVers, Key: name, Value: b})
}

func (s *deviceStore) GetAppStateVersion(ctx context.Context, name string) (uint64, [128]byte, error) {
	var hash [128]byte
	v, ok := s.kv.get(ctx, groupAppStateVers, name)
	if !ok {
		return 0, hash, nil
	}
	var sv savedVersion
	if json.Unmarshal(v, &sv) != nil || len(sv.Hash) != 128 {
		return 0, hash, errors.New("an app state version is not readable")
	}
	return sv.Version, [128]byte(sv.Hash), nil
}

// DeleteAppStateVersion forgets a collection's version and its MACs (the
// collection is fetched whole again).
func (s *deviceStore) DeleteAppStateVersion(ctx context.Context, name string) error {
	changes := []port.KeyChange{{Group: groupAppStateVers, Key: name}}
	for _, k := range s.kv.keysWithPrefix(ctx, groupAppStateMACs, name+"|") {
		changes = append(changes, port.KeyChange{Group: groupAppStateMACs, Key: k})
	}
	return s.kv.put(ctx, changes...)
}

func macKey(name string, indexMAC []byte) string { return name + "|" + hex.EncodeToString(indexMAC) }

func (s *deviceStore) PutAppStateMutationMACs(ctx context.Context, name string, version uint64, mutations []store.AppStateMutationMAC) error {
	changes := make([]port.KeyChange, 0, len(mutations))
	for _, m := range mutations {
		v := make([]byte, 8, 8+len(m.ValueMAC))
		binary.BigEndian.PutUint64(v, version)
		changes = append(changes, port.KeyChange{Group: groupAppStateMACs, Key: macKey(name, m.IndexMAC), Value: append(v, m.ValueMAC...)})
	}
	return s.kv.put(ctx, changes...)
}

func (s *deviceStore) DeleteAppStateMutationMACs(ctx context.Context, name string, indexMACs [][]byte) error {
	changes := make([]port.KeyChange, 0, len(indexMACs))
	for _, m := range indexMACs {
		changes = append(changes, port.KeyChange{Group: groupAppStateMACs, Key: macKey(name, m)})
	}
	return s.kv.put(ctx, changes...)
}

func (s *deviceStore) GetAppStateMutationMAC(ctx context.Context, name string, indexMAC []byte) ([]byte, error) {
	v, ok := s.kv.get(ctx, groupAppStateMACs, macKey(name, indexMAC))
	if !ok || len(v) < 8 {
		return nil, nil
	}
	return v[8:], nil
}

// ---- contacts and chat settings (memory only) ----

func (s *deviceStore) contact(ctx context.Context, user types.JID) types.ContactInfo {
	var c types.ContactInfo
	if v, ok := s.kv.get(ctx, groupContacts, user.String()); ok {
		_ = json.Unmarshal(v, &c)
	}
	return c
}

func (s *deviceStore) putContact(ctx context.Context, user types.JID, c types.ContactInfo) error {
	c.Found = true
	b, _ := json.Marshal(c)
	return s.kv.put(ctx, port.KeyChange{Group: groupContacts, Key: user.String(), Value: b})
}

func (s *deviceStore) PutPushName(ctx context.Context, user types.JID, pushName string) (bool, string, error) {
	c := s.contact(ctx, user)
	if c.PushName == pushName {
		return false, "", nil
	}
	prev := c.PushName
	c.PushName = pushName
	return true, prev, s.putContact(ctx, user, c)
}

func (s *deviceStore) PutBusinessName(ctx context.Context, user types.JID, businessName string) (bool, string, error) {
	c := s.contact(ctx, user)
	if c.BusinessName == businessName {
		return false, "", nil
	}
	prev := c.BusinessName
	c.BusinessName = businessName
	return true, prev, s.putContact(ctx, user, c)
}

func (s *deviceStore) PutContactName(ctx context.Context, user types.JID, fullName, firstName string) error {
	c := s.contact(ctx, user)
	c.FullName, c.FirstName = fullName, firstName
	return s.putContact(ctx, user, c)
}

func (s *deviceStore) PutAllContactNames(ctx context.Context, contacts []store.ContactEntry) error {
	for _, e := range contacts {
		if err := s.PutContactName(ctx, e.JID, e.FullName, e.FirstName); err != nil {
			return err
		}
	}
	return nil
}

func (s *deviceStore) PutManyRedactedPhones(ctx context.Context, entries []store.RedactedPhoneEntry) error {
	for _, e := range entries {
		c := s.contact(ctx, e.JID)
		c.RedactedPhone = e.RedactedPhone
		if err := s.putContact(ctx, e.JID, c); err != nil {
			return err
		}
	}
	return nil
}

func (s *deviceStore) GetContact(ctx context.Context, user types.JID) (types.ContactInfo, error) {
	return s.contact(ctx, user), nil
}

func (s *deviceStore) GetAllContacts(ctx context.Context) (map[types.JID]types.ContactInfo, error) {
	out := map[types.JID]types.ContactInfo{}
	for k, v := range s.kv.scan(ctx, groupContacts) {
		jid, err := types.ParseJID(k)
		var c types.ContactInfo
		if err == nil && json.Unmarshal(v, &c) == nil {
			out[jid] = c
		}
	}
	return out, nil
}

func (s *deviceStore) chatSettings(ctx context.Context, chat types.JID) types.LocalChatSettings {
	var c types.LocalChatSettings
	if v, ok := s.kv.get(ctx, groupChatSettings, chat.String()); ok {
		_ = json.Unmarshal(v, &c)
	}
	return c
}

func (s *deviceStore) putChatSettings(ctx context.Context, chat types.JID, f func(*types.LocalChatSettings)) error {
	c := s.chatSettings(ctx, chat)
	f(&c)
	c.Found = true
	b, _ := json.Marshal(c)
	return s.kv.put(ctx, port.KeyChange{Group: groupChatSettings, Key: chat.String(), Value: b})
}

func (s *deviceStore) PutMutedUntil(ctx context.Context, chat types.JID, mutedUntil time.Time) error {
	return s.putChatSettings(ctx, chat, func(c *types.LocalChatSettings) { c.MutedUntil = mutedUntil })
}

func (s *deviceStore) PutPinned(ctx context.Context, chat types.JID, pinned bool) error {
	return s.putChatSettings(ctx, chat, func(c *types.LocalChatSettings) { c.Pinned = pinned })
}

func (s *deviceStore) PutArchived(ctx context.Context, chat types.JID, archived bool) error {
	return s.putChatSettings(ctx, chat, func(c *types.LocalChatSettings) { c.Archived = archived })
}

func (s *deviceStore) GetChatSettings(ctx context.Context, chat types.JID) (types.LocalChatSettings, error) {
	return s.chatSettings(ctx, chat), nil
}

// ---- message secrets (memory only) ----

type savedSecret struct {
	Secret []byte `json:"secret"`
	Sender string `json:"sender"`
}

func secretKey(chat, sender types.JID, id types.MessageID) string {
	return chat.ToNonAD().String() + "|" + sender.ToNonAD().String() + "|" + id
}

func (s *deviceStore) PutMessageSecrets(ctx context.Context, inserts []store.MessageSecretInsert) error {
	for _, in := range inserts {
		if err := s.PutMessageSecret(ctx, in.Chat, in.Sender, in.ID, in.Secret); err != nil {
			return err
		}
	}
	return nil
}

func (s *deviceStore) PutMessageSecret(ctx context.Context, chat, sender types.JID, id types.MessageID, secret []byte) error {
	b, _ := json.Marshal(savedSecret{Secret: secret, Sender: sender.ToNonAD().String()})
	return s.kv.put(ctx, port.KeyChange{Group: groupMsgSecrets, Key: secretKey(chat, sender, id), Value: b})
}

func (s *deviceStore) GetMessageSecret(ctx context.Context, chat, sender types.JID, id types.MessageID) ([]byte, types.JID, error) {
	v, ok := s.kv.get(ctx, groupMsgSecrets, secretKey(chat, sender, id))
	if !ok {
		return nil, types.EmptyJID, nil
	}
	var sec savedSecret
	if json.Unmarshal(v, &sec) != nil {
		return nil, types.EmptyJID, nil
	}
	real, _ := types.ParseJID(sec.Sender)
	return sec.Secret, real, nil
}

// ---- privacy tokens ----

type savedToken struct {
	Token     []byte `json:"token"`
	Timestamp int64  `json:"ts"`
}

func (s *deviceStore) PutPrivacyTokens(ctx context.Context, tokens ...store.PrivacyToken) error {
	changes := make([]port.KeyChange, 0, len(tokens))
	for _, t := range tokens {
		b, _ := json.Marshal(savedToken{Token: t.Token, Timestamp: t.Timestamp.Unix()})
		changes = append(changes, port.KeyChange{Group: groupPrivacyTokens, Key: t.User.ToNonAD().String(), Value: b})
	}
	return s.kv.put(ctx, changes...)
}

// GetPrivacyToken finds a peer's token by its address or its twin (phone
// and LID), as sqlstore does.
func (s *deviceStore) GetPrivacyToken(ctx context.Context, user types.JID) (*store.PrivacyToken, error) {
	user = user.ToNonAD()
	candidates := []types.JID{user}
	if alt, err := s.altJID(ctx, user); err == nil && !alt.IsEmpty() {
		candidates = append(candidates, alt)
	}
	for _, c := range candidates {
		v, ok := s.kv.get(ctx, groupPrivacyTokens, c.String())
		if !ok {
			continue
		}
		var t savedToken
		if json.Unmarshal(v, &t) != nil {
			continue
		}
		return &store.PrivacyToken{User: user, Token: t.Token, Timestamp: time.Unix(t.Timestamp, 0)}, nil
	}
	return nil, nil
}

func (s *deviceStore) altJID(ctx context.Context, jid types.JID) (types.JID, error) {
	switch jid.Server {
	case types.DefaultUserServer:
		return s.GetLIDForPN(ctx, jid)
	case types.HiddenUserServer:
		return s.GetPNForLID(ctx, jid)
	}
	return types.EmptyJID, nil
}

// ---- the decryption buffer (memory only) ----

type savedEvent struct {
	Plaintext  []byte `json:"plaintext,omitempty"`
	InsertTime int64  `json:"inserted"`
	ServerTime int64  `json:"server"`
}

func (s *deviceStore) GetBufferedEvent(ctx context.Context, hash [32]byte) (*store.BufferedEvent, error) {
	v, ok := s.kv.get(ctx, groupEventBuffer, hex.EncodeToString(hash[:]))
	if !ok {
		return nil, nil
	}
	var e savedEvent
	if json.Unmarshal(v, &e) != nil {
		return nil, nil
	}
	return &store.BufferedEvent{Plaintext: e.Plaintext, InsertTime: time.UnixMilli(e.InsertTime), ServerTime: time.UnixMilli(e.ServerTime)}, nil
}

func (s *deviceStore) PutBufferedEvent(ctx context.Context, hash [32]byte, plaintext []byte, serverTime time.Time) error {
	b, _ := json.Marshal(savedEvent{Plaintext: plaintext, InsertTime: time.Now().UnixMilli(), ServerTime: serverTime.UnixMilli()})
	return s.kv.put(ctx, port.KeyChange{Group: groupEventBuffer, Key: hex.EncodeToString(hash[:]), Value: b})
}

// DoDecryptionTxn holds a decryption's writes (the ratchet's new session
// among them) until it succeeded, then saves them together: a failed
// decryption leaves the session as it was, as sqlstore's transaction does.
func (s *deviceStore) DoDecryptionTxn(ctx context.Context, fn func(context.Context) error) error {
	return s.kv.inTx(ctx, fn)
}

func (s *deviceStore) ClearBufferedEventPlaintext(ctx context.Context, hash [32]byte) error {
	e, _ := s.GetBufferedEvent(ctx, hash)
	if e == nil {
		return nil
	}
	b, _ := json.Marshal(savedEvent{InsertTime: e.InsertTime.UnixMilli(), ServerTime: e.ServerTime.UnixMilli()})
	return s.kv.put(ctx, port.KeyChange{Group: groupEventBuffer, Key: hex.EncodeToString(hash[:]), Value: b})
}

// DeleteOldBufferedHashes forgets hashes older than two weeks (sqlstore's
// bound), which WhatsApp no longer sends again.
func (s *deviceStore) DeleteOldBufferedHashes(ctx context.Context) error {
	cutoff := time.Now().Add(-14 * 24 * time.Hour).UnixMilli()
	var changes []port.KeyChange
	for k, v := range s.kv.scan(ctx, groupEventBuffer) {
		var e savedEvent
		if json.Unmarshal(v, &e) != nil || e.InsertTime < cutoff {
			changes = append(changes, port.KeyChange{Group: groupEventBuffer, Key: k})
		}
	}
	return s.kv.put(ctx, changes...)
}

// ---- LID map ----

func (s *deviceStore) PutManyLIDMappings(ctx context.Context, mappings []store.LIDMapping) error {
	var changes []port.KeyChange
	for _, m := range mappings {
		changes = append(changes, s.lidChanges(ctx, m.LID, m.PN)...)
	}
	return s.kv.put(ctx, changes...)
}

func (s *deviceStore) PutLIDMapping(ctx context.Context, lid, pn types.JID) error {
	return s.kv.put(ctx, s.lidChanges(ctx, lid, pn)...)
}

// lidChanges map lid's user to pn's and back; a phone that had another
// LID loses the old pair, as in sqlstore's unique index.
func (s *deviceStore) lidChanges(ctx context.Context, lid, pn types.JID) []port.KeyChange {
	if lid.Server != types.HiddenUserServer || pn.Server != types.DefaultUserServer || lid.User == "" || pn.User == "" {
		return nil
	}
	var changes []port.KeyChange
	if old, ok := s.kv.get(ctx, groupLIDs, "pn:"+pn.User); ok && string(old) != lid.User {
		changes = append(changes, port.KeyChange{Group: groupLIDs, Key: "lid:" + string(old)})
	}
	return append(changes,
		port.KeyChange{Group: groupLIDs, Key: "lid:" + lid.User, Value: []byte(pn.User)},
		port.KeyChange{Group: groupLIDs, Key: "pn:" + pn.User, Value: []byte(lid.User)},
	)
}

func (s *deviceStore) GetPNForLID(ctx context.Context, lid types.JID) (types.JID, error) {
	if v, ok := s.kv.get(ctx, groupLIDs, "lid:"+lid.User); ok {
		return types.NewJID(string(v), types.DefaultUserServer), nil
	}
	return types.EmptyJID, nil
}

func (s *deviceStore) GetLIDForPN(ctx context.Context, pn types.JID) (types.JID, error) {
	if v, ok := s.kv.get(ctx, groupLIDs, "pn:"+pn.User); ok {
		return types.NewJID(string(v), types.HiddenUserServer), nil
	}
	return types.EmptyJID, nil
}

func (s *deviceStore) GetManyLIDsForPNs(ctx context.Context, pns []types.JID) (map[types.JID]types.JID, error) {
	out := map[types.JID]types.JID{}
	for _, pn := range pns {
		if lid, _ := s.GetLIDForPN(ctx, pn); !lid.IsEmpty() {
			out[pn] = lid
		}
	}
	return out, nil
}
