// Command invisible-dots-whatsapp is the WhatsApp channel's program: the
// server (internal/channels/port) starts it and speaks to it over a unix
// socket, one connection per linked device. It is a module of its own
// because whatsmeow's Signal library (go.mau.fi/libsignal) is GPL-3.0 and
// the server holds nothing GPL; it is built and installed only by whoever
// turns WhatsApp on (make whatsapp, INVISIBLE_DOTS_WHATSAPP=1).
//
// It holds each device's state in memory only: every change is sent to
// the server, which keeps it encrypted, and is acknowledged before
// whatsmeow goes on. It reads one-to-one chats only, sends plain text
// only (never a link preview), marks a chat read only as it answers, and
// shows typing and pauses before each send. It is not an official way to
// use WhatsApp: WhatsApp can restrict or ban the account (ref 9.8).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"go.mau.fi/whatsmeow/store"
	waLog "go.mau.fi/whatsmeow/util/log"
	"google.golang.org/protobuf/proto"

	"github.com/invisible-dots/invisible-dots/internal/channels/port"
)

func main() {
	socket := flag.String("socket", "", "the unix socket to listen on (the server gives it)")
	flag.Parse()
	if *socket == "" {
		fmt.Fprintln(os.Stderr, port.ProgramName+": --socket is required; the invisible-dots server starts this program itself when INVISIBLE_DOTS_WHATSAPP=1")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, *socket, defaultOptions()); err != nil {
		fmt.Fprintln(os.Stderr, port.ProgramName+": "+err.Error())
		os.Exit(1)
	}
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, port.ProgramName+": "+format+"\n", args...)
}

func defaultOptions() Options {
	// The name the phone shows under Linked devices.
	store.DeviceProps.Os = proto.String("invisible-dots")
	return Options{
		NewClient: newWhatsmeowClient,
		Pause:     humanPause,
		Log:       logf,
		// Warnings and errors only: whatsmeow's debug lines name peers.
		ClientLog: waLog.Stdout("whatsmeow", "WARN", false),
	}
}

// run listens on socket until ctx ends, serving each connection as a
// session of its own.
func run(ctx context.Context, socket string, opts Options) error {
	_ = os.Remove(socket)
	// The socket is the server's user's alone (the directory is too).
	old := syscall.Umask(0o077)
	ln, err := net.Listen("unix", socket)
	syscall.Umask(old)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", socket, err)
	}
	defer os.Remove(socket)
	context.AfterFunc(ctx, func() { ln.Close() })
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("accepting a connection: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			serve(ctx, c, opts)
		}()
	}
}
