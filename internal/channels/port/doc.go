// Package port is the WhatsApp channel's adapter in the server and the
// protocol it speaks with the WhatsApp program (invisible-dots-whatsapp,
// built from the nested module internal/channels/whatsapp). The program
// holds the WhatsApp client, whose Signal library is GPL-3.0; the server
// holds nothing GPL, so the two are separate programs that talk over a
// unix socket, and this package imports no WhatsApp library.
//
// # Protocol (version 1)
//
// JSON lines (Frame) over a unix socket the program listens on, in a
// directory only the server's user can enter. Each connection is one
// session of one device; the program serves many at once.
//
//	server → program                      program → server
//	hello {v, keys}                       welcome {v}
//	                                      code {code}            (linking)
//	                                      linked {account}
//	                                      connected {account}
//	                                      keys {id, changes}
//	ack {id} | nack {id, error}
//	                                      message {id, message}
//	done {id}
//	send {id, chat, text, no_preview}     result {id, ref | error}
//	edit {id, chat, ref, text, no_preview} result {id | error}
//	typing {id, chat}                     result {id | error}
//	drop {reason}                         closed {reason, error}
//
// hello carries the device's keys (KeyStore.Load); with none, the program
// links a new device and sends a code frame for each QR code. The device's
// state lives in the program's memory only: each change is a keys frame,
// and the program's write returns only after the ack, which the server
// sends once KeyStore.Save returned (a nack fails the write). A message
// frame is followed by the next only after its done: the server sends done
// once the hub recorded the message, and drop when it could not, because
// WhatsApp confirmed the message to its sender on arrival and will not
// offer it again (at most once: the person writes again). closed says why
// the program ended a session: logged_out, link_timeout and link_rejected
// need a new link (channels.ErrNeedsRelink); disconnected and failed are
// retried by the hub. Every send and edit carries no_preview, and the
// program refuses one without it: nothing a Dot names is fetched for a
// preview (ref 9.8). The program marks the chat read, shows typing and
// waits 0.4 to 1.5 s before each send. docs/channel-port.md says the same
// for people who build another program.
//
// # Pieces, and how the server wires them
//
// Launch starts the program once (when INVISIBLE_DOTS_WHATSAPP=1) and keeps
// it running; its Dial is every Adapter's. New makes a Channel's Adapter for
// each start the hub makes (hub.Serve.NewAdapter), with the Channel's
// KeyStore (a Secret the Channel owns, whose Save applies the changes in
// order in one write, Keys.Apply, and refuses with ErrChannelGone once the
// Channel is deleted), links.For(channel) as its Linking, and OnAccount for
// the Channel's status. A link starts with Links.Begin and the Channel's
// keys deleted (a new device); the link route streams Links.Watch as
// wire.ChannelLinkFrame; a deleted Channel's codes go with Links.Forget.
// porttest holds the fakes for tests: the program's side of the socket and
// a KeyStore in memory.
package port
