// Package channels is the messaging channel hub's policies (ref 9.8): who
// may talk to a Dot from a chat and how much, what a chat's text becomes,
// and the shapes an adapter carries. The policies are the hub's alone; an
// adapter (Telegram, WhatsApp) is transport only and holds none of them.
//
// What is here so far: pairing codes (pairing.go), the token bucket each
// paired person is held to (bucket.go), the bound on a message and the
// split of an answer at an adapter's bound (text.go), and the approval
// buttons' data (buttons.go). The hub's run loop, the Channel resource and
// the Telegram adapter build on them.
package channels
