package main

import (
	"context"
	"testing"

	waLog "go.mau.fi/whatsmeow/util/log"
)

// TestTheRealClientTakesTheStore builds whatsmeow's own client over this
// program's store and asks for the QR channel, as a link does, stopping
// before Connect: nothing here reaches WhatsApp.
func TestTheRealClientTakesTheStore(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, _ := newTestStore(nil)
	dev, linked, err := newDevice(ctx, s, waLog.Noop)
	if err != nil || linked {
		t.Fatalf("new device: linked %v, %v", linked, err)
	}
	c := newWhatsmeowClient(dev, waLog.Noop)
	wc := c.(whatsmeowClient).cli
	if wc.EnableAutoReconnect {
		t.Error("whatsmeow reconnects on its own; the hub's backoff is the one retry")
	}
	if !wc.ManualHistorySyncDownload {
		t.Error("whatsmeow downloads the history; a link must not replay old chats")
	}
	if _, err := c.GetQRChannel(ctx); err != nil {
		t.Fatalf("GetQRChannel on a device not linked: %v", err)
	}
	if wc.IsConnected() {
		t.Error("the client connected")
	}
}
