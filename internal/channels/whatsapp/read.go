package main

import (
	"context"

	"go.mau.fi/whatsmeow/proto/waE2E"
	"go.mau.fi/whatsmeow/types"
	"go.mau.fi/whatsmeow/types/events"
	"google.golang.org/protobuf/proto"

	"github.com/invisible-dots/invisible-dots/internal/channels/port"
)

// pnForLID is what the account learned of a LID's phone number (a local
// lookup: nothing is sent to WhatsApp).
type pnForLID func(ctx context.Context, lid types.JID) (types.JID, error)

// readMessage is what the server gets of a message, or false when it is
// not one the server hears: only one-to-one chats with a person (no group,
// broadcast, status or channel post, nothing the account wrote itself), and
// no protocol traffic (reactions, edits, deletes, key shares, polls' votes).
func readMessage(ctx context.Context, evt *events.Message, own types.JID, lookup pnForLID) (port.Message, bool) {
	info := evt.Info
	if info.IsFromMe || info.IsGroup || evt.Message == nil {
		return port.Message{}, false
	}
	chat := info.Chat.ToNonAD()
	if chat.Server != types.DefaultUserServer && chat.Server != types.HiddenUserServer {
		return port.Message{}, false
	}
	sender := info.Sender.ToNonAD()
	if sender.User != chat.User || sender.Server != chat.Server {
		// In a one-to-one chat the sender is the chat; anything else is
		// a message of the account's own other device, or not a person's.
		return port.Message{}, false
	}
	if evt.IsEdit || !isContent(evt.Message) {
		return port.Message{}, false
	}
	text, hasText := textOf(evt.Message)
	return port.Message{
		Peer:       peerOf(ctx, sender, info.SenderAlt, lookup),
		Label:      info.PushName,
		Chat:       chat.String(),
		ExternalID: own.ToNonAD().User + ":" + info.ID,
		Text:       text,
		HasText:    hasText,
	}, true
}

// peerOf is the person's stable id: the phone number's digits when known
// (from the address, its twin in the same message, or the account's LID
// map), else "lid:" and the LID, so one person is one peer whichever
// address WhatsApp uses.
func peerOf(ctx context.Context, sender, alt types.JID, lookup pnForLID) string {
	if sender.Server == types.DefaultUserServer {
		return sender.User
	}
	if alt.Server == types.DefaultUserServer && alt.User != "" {
		return alt.ToNonAD().User
	}
	if lookup != nil {
		if pn, err := lookup(ctx, sender); err == nil && pn.User != "" {
			return pn.User
		}
	}
	return "lid:" + sender.User
}

// textOf is a message's text: a conversation or an extended text (a text
// with a link or a quote); anything else (a photo's caption too) is not a
// text the server reads yet.
func textOf(m *waE2E.Message) (string, bool) {
	if t := m.GetConversation(); t != "" {
		return t, true
	}
	if t := m.GetExtendedTextMessage().GetText(); t != "" {
		return t, true
	}
	return "", false
}

// isContent says whether a message is something a person sent (a text, a
// photo, a voice note, a kind this program does not know yet), not
// protocol traffic or an envelope with nothing in it.
func isContent(m *waE2E.Message) bool {
	if m.ProtocolMessage != nil || m.ReactionMessage != nil || m.EncReactionMessage != nil ||
		m.PollUpdateMessage != nil || m.KeepInChatMessage != nil || m.PinInChatMessage != nil ||
		m.EditedMessage != nil || m.SecretEncryptedMessage != nil {
		return false
	}
	// A sender key or the context's metadata alone is no message.
	rest := proto.Clone(m).(*waE2E.Message)
	rest.SenderKeyDistributionMessage = nil
	rest.MessageContextInfo = nil
	return proto.Size(rest) > 0
}

// contentFields are the kinds of content a message holds besides text.
func contentFields(m *waE2E.Message) []string {
	var out []string
	if m.ImageMessage != nil {
		out = append(out, "image")
	}
	if m.AudioMessage != nil {
		out = append(out, "audio")
	}
	if m.VideoMessage != nil {
		out = append(out, "video")
	}
	if m.DocumentMessage != nil {
		out = append(out, "document")
	}
	if m.StickerMessage != nil {
		out = append(out, "sticker")
	}
	if m.ContactMessage != nil || m.ContactsArrayMessage != nil {
		out = append(out, "contact")
	}
	if m.LocationMessage != nil || m.LiveLocationMessage != nil {
		out = append(out, "location")
	}
	if m.PollCreationMessage != nil || m.PollCreationMessageV2 != nil || m.PollCreationMessageV3 != nil {
		out = append(out, "poll")
	}
	return out
}
