package main

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.mau.fi/whatsmeow/proto/waE2E"
	"go.mau.fi/whatsmeow/types"
	"go.mau.fi/whatsmeow/types/events"
	"google.golang.org/protobuf/proto"

	"github.com/invisible-dots/invisible-dots/internal/channels/port"
)

var (
	own      = types.NewADJID("4915100000000", 0, 7)
	anaPN    = types.NewJID("4915111111111", types.DefaultUserServer)
	anaLID   = types.NewJID("987654", types.HiddenUserServer)
	anaPhone = types.NewADJID("4915111111111", 0, 3) // her phone's device address
)

func text(s string) *waE2E.Message { return &waE2E.Message{Conversation: proto.String(s)} }

func msgEvent(chat, sender types.JID, m *waE2E.Message, edit func(*events.Message)) *events.Message {
	e := &events.Message{
		Info: types.MessageInfo{
			MessageSource: types.MessageSource{Chat: chat, Sender: sender},
			ID:            "3EB0AAA", PushName: "Ana",
		},
		Message: m,
	}
	if edit != nil {
		edit(e)
	}
	return e
}

func TestReadMessage(t *testing.T) {
	known := func(_ context.Context, lid types.JID) (types.JID, error) {
		if lid.User == "555" {
			return types.NewJID("4915122222222", types.DefaultUserServer), nil
		}
		return types.EmptyJID, nil
	}
	tests := map[string]struct {
		reason string
		evt    *events.Message
		want   *port.Message
	}{
		"phone text": {
			reason: "a person's text by phone address: the peer is the number, device suffix dropped",
			evt:    msgEvent(anaPN, anaPhone, text("hello"), nil),
			want:   &port.Message{Peer: "4915111111111", Label: "Ana", Chat: "4915111111111@s.whatsapp.net", ExternalID: "4915100000000:3EB0AAA", Text: "hello", HasText: true},
		},
		"lid with twin": {
			reason: "a LID address with its phone twin in the same message: the peer is the number, the chat the LID",
			evt: msgEvent(anaLID, anaLID, text("hi"), func(e *events.Message) {
				e.Info.SenderAlt = types.NewADJID("4915111111111", 0, 3)
			}),
			want: &port.Message{Peer: "4915111111111", Label: "Ana", Chat: "987654@lid", ExternalID: "4915100000000:3EB0AAA", Text: "hi", HasText: true},
		},
		"lid learned": {
			reason: "a LID whose number the account learned earlier",
			evt:    msgEvent(types.NewJID("555", types.HiddenUserServer), types.NewJID("555", types.HiddenUserServer), text("x"), nil),
			want:   &port.Message{Peer: "4915122222222", Label: "Ana", Chat: "555@lid", ExternalID: "4915100000000:3EB0AAA", Text: "x", HasText: true},
		},
		"lid unknown": {
			reason: "a LID whose number is not known: lid:",
			evt:    msgEvent(anaLID, anaLID, text("x"), nil),
			want:   &port.Message{Peer: "lid:987654", Label: "Ana", Chat: "987654@lid", ExternalID: "4915100000000:3EB0AAA", Text: "x", HasText: true},
		},
		"link text": {
			reason: "a text with a link is an extended text",
			evt:    msgEvent(anaPN, anaPN, &waE2E.Message{ExtendedTextMessage: &waE2E.ExtendedTextMessage{Text: proto.String("see https://x.example")}}, nil),
			want:   &port.Message{Peer: "4915111111111", Label: "Ana", Chat: "4915111111111@s.whatsapp.net", ExternalID: "4915100000000:3EB0AAA", Text: "see https://x.example", HasText: true},
		},
		"photo": {
			reason: "a photo is a message without text (told 'not supported yet' by the hub)",
			evt:    msgEvent(anaPN, anaPN, &waE2E.Message{ImageMessage: &waE2E.ImageMessage{Caption: proto.String("look")}}, nil),
			want:   &port.Message{Peer: "4915111111111", Label: "Ana", Chat: "4915111111111@s.whatsapp.net", ExternalID: "4915100000000:3EB0AAA"},
		},
		"group": {
			reason: "a group's message is not heard",
			evt: msgEvent(types.NewJID("1203630", types.GroupServer), anaPN, text("hi all"), func(e *events.Message) {
				e.Info.IsGroup = true
			}),
		},
		"broadcast": {
			reason: "a broadcast or status is not heard",
			evt:    msgEvent(types.StatusBroadcastJID, anaPN, text("status"), nil),
		},
		"channel post": {
			reason: "a channel's post is not heard",
			evt:    msgEvent(types.NewJID("12036", types.NewsletterServer), anaPN, text("news"), nil),
		},
		"own": {
			reason: "what the account wrote itself (from the phone) is not heard",
			evt: msgEvent(anaPN, own, text("from my phone"), func(e *events.Message) {
				e.Info.IsFromMe = true
			}),
		},
		"reaction": {
			reason: "a reaction is protocol traffic, not a message",
			evt:    msgEvent(anaPN, anaPN, &waE2E.Message{ReactionMessage: &waE2E.ReactionMessage{Text: proto.String("👍")}}, nil),
		},
		"edit": {
			reason: "an edit of an earlier message is not a new one",
			evt:    msgEvent(anaPN, anaPN, text("fixed"), func(e *events.Message) { e.IsEdit = true }),
		},
		"revoke": {
			reason: "a delete is protocol traffic",
			evt:    msgEvent(anaPN, anaPN, &waE2E.Message{ProtocolMessage: &waE2E.ProtocolMessage{}}, nil),
		},
		"sender key alone": {
			reason: "a sender key with nothing else is no message",
			evt: msgEvent(anaPN, anaPN, &waE2E.Message{SenderKeyDistributionMessage: &waE2E.SenderKeyDistributionMessage{GroupID: proto.String("g")},
				MessageContextInfo: &waE2E.MessageContextInfo{}}, nil),
		},
		"voice note": {
			reason: "a voice note is a message without text",
			evt:    msgEvent(anaPN, anaPN, &waE2E.Message{AudioMessage: &waE2E.AudioMessage{PTT: proto.Bool(true)}}, nil),
			want:   &port.Message{Peer: "4915111111111", Label: "Ana", Chat: "4915111111111@s.whatsapp.net", ExternalID: "4915100000000:3EB0AAA"},
		},
		"other sender": {
			reason: "in a one-to-one chat only the person writes",
			evt:    msgEvent(anaPN, types.NewJID("4915199999999", types.DefaultUserServer), text("x"), nil),
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, ok := readMessage(context.Background(), tc.evt, own, known)
			if tc.want == nil {
				if ok {
					t.Errorf("%s: read %+v, want it dropped", tc.reason, got)
				}
				return
			}
			if !ok {
				t.Fatalf("%s: dropped, want %+v", tc.reason, *tc.want)
			}
			if diff := cmp.Diff(*tc.want, got); diff != "" {
				t.Errorf("%s (-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}

func TestATextMessageCarriesNoPreview(t *testing.T) {
	m := textMessage("open https://example.com/?q=secret")
	if m.GetConversation() != "open https://example.com/?q=secret" {
		t.Errorf("text = %q", m.GetConversation())
	}
	if m.ExtendedTextMessage != nil {
		t.Errorf("a text is sent as an extended text, which carries a preview: %v", m.ExtendedTextMessage)
	}
}
