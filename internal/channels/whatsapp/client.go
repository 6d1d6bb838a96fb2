package main

import (
	"context"
	"time"

	"go.mau.fi/whatsmeow"
	"go.mau.fi/whatsmeow/proto/waE2E"
	"go.mau.fi/whatsmeow/store"
	"go.mau.fi/whatsmeow/types"
	waLog "go.mau.fi/whatsmeow/util/log"
	"google.golang.org/protobuf/proto"
)

// Client is what a session uses of whatsmeow's client: *whatsmeow.Client
// through whatsmeowClient in the program, a fake in tests (no test
// reaches WhatsApp's network).
type Client interface {
	AddEventHandler(handler func(evt any)) uint32
	// GetQRChannel is called before Connect for a device not linked yet.
	GetQRChannel(ctx context.Context) (<-chan whatsmeow.QRChannelItem, error)
	Connect() error
	Disconnect()
	// SendText sends text as a plain message, never with a link preview.
	SendText(ctx context.Context, to types.JID, text string) (types.MessageID, error)
	// EditText replaces a sent message's text, never with a preview.
	EditText(ctx context.Context, chat types.JID, id types.MessageID, text string) error
	// ChatPresence shows typing in chat (or stops it).
	ChatPresence(ctx context.Context, chat types.JID, typing bool) error
	MarkRead(ctx context.Context, ids []types.MessageID, at time.Time, chat, sender types.JID) error
}

// NewClient makes the client of a device.
type NewClient func(dev *store.Device, log waLog.Logger) Client

// whatsmeowClient is Client over whatsmeow.
type whatsmeowClient struct{ cli *whatsmeow.Client }

func newWhatsmeowClient(dev *store.Device, log waLog.Logger) Client {
	cli := whatsmeow.NewClient(dev, log)
	// The hub restarts a lost link with its backoff, so the Channel's
	// status says the link is down while it is (the reconnect WhatsApp
	// asks for after a link, code 515, is whatsmeow's and stays on).
	cli.EnableAutoReconnect = false
	// History is not read: a new link does not replay old chats.
	cli.ManualHistorySyncDownload = true
	cli.AutomaticMessageRerequestFromPhone = true
	return whatsmeowClient{cli: cli}
}

func (c whatsmeowClient) AddEventHandler(h func(evt any)) uint32 { return c.cli.AddEventHandler(h) }

func (c whatsmeowClient) GetQRChannel(ctx context.Context) (<-chan whatsmeow.QRChannelItem, error) {
	return c.cli.GetQRChannel(ctx)
}

func (c whatsmeowClient) Connect() error { return c.cli.Connect() }
func (c whatsmeowClient) Disconnect()    { c.cli.Disconnect() }

func (c whatsmeowClient) SendText(ctx context.Context, to types.JID, text string) (types.MessageID, error) {
	resp, err := c.cli.SendMessage(ctx, to, textMessage(text))
	return resp.ID, err
}

func (c whatsmeowClient) EditText(ctx context.Context, chat types.JID, id types.MessageID, text string) error {
	_, err := c.cli.SendMessage(ctx, chat, c.cli.BuildEdit(chat, id, textMessage(text)))
	return err
}

func (c whatsmeowClient) ChatPresence(ctx context.Context, chat types.JID, typing bool) error {
	state := types.ChatPresencePaused
	if typing {
		state = types.ChatPresenceComposing
	}
	return c.cli.SendChatPresence(ctx, chat, state, types.ChatPresenceMediaText)
}

func (c whatsmeowClient) MarkRead(ctx context.Context, ids []types.MessageID, at time.Time, chat, sender types.JID) error {
	return c.cli.MarkRead(ctx, ids, at, chat, sender)
}

// textMessage is a plain text message: a conversation, which carries no
// link preview (an extended text message would: its matched text, title
// and thumbnail are a preview the sender fetched). Nothing a Dot names is
// fetched on its behalf (ref 9.8).
func textMessage(text string) *waE2E.Message {
	return &waE2E.Message{Conversation: proto.String(text)}
}
