// The WhatsApp program, a module of its own: whatsmeow's Signal library is
// GPL-3.0 and the main module holds nothing GPL. It builds against the main
// module in this tree (replace below) for the channel protocol's types; after
// the main go.mod changes, run `go mod tidy` here too.
module github.com/invisible-dots/invisible-dots/internal/channels/whatsapp

go 1.26.5

require (
	github.com/go-logr/logr v1.4.4
	github.com/google/go-cmp v0.7.0
	github.com/google/uuid v1.6.0
	github.com/invisible-dots/invisible-dots v0.0.0
	go.mau.fi/libsignal v0.2.1
	go.mau.fi/whatsmeow v0.0.0-20251217143725-11cf47c62d32
	google.golang.org/protobuf v1.36.12
)

require (
	filippo.io/edwards25519 v1.1.0 // indirect
	github.com/beeper/argo-go v1.1.2 // indirect
	github.com/coder/websocket v1.8.15 // indirect
	github.com/elliotchance/orderedmap/v3 v3.1.0 // indirect
	github.com/mattn/go-colorable v0.1.14 // indirect
	github.com/mattn/go-isatty v0.0.24 // indirect
	github.com/rs/zerolog v1.34.0 // indirect
	github.com/vektah/gqlparser/v2 v2.5.27 // indirect
	go.mau.fi/util v0.9.4 // indirect
	golang.org/x/crypto v0.58.0 // indirect
	golang.org/x/net v0.61.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.43.0 // indirect
)

replace github.com/invisible-dots/invisible-dots => ../../..
