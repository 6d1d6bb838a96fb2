package wire

import (
	"net/url"
	"strings"
	"time"
)

// A Dot's messaging channels (ref 9.8): the Channel resource is read,
// paused, set and deleted through the resource API; these routes do what
// is not a resource's write (credentials checked before they are stored,
// pairing codes, unpairing a person, linking WhatsApp by a code).

// Error codes of the channel routes.
const (
	// CodeInvalidCredentials: the service does not accept the credentials
	// (400); the message never holds them.
	CodeInvalidCredentials = "invalid_credentials"
	// CodeChannelUnreachable: the service could not be asked (502).
	CodeChannelUnreachable = "channel_unreachable"
	// CodeAccountInUse: another Channel already uses the account (409): a
	// bot serves one Dot.
	CodeAccountInUse = "account_in_use"
	// CodeAlreadyExists: the Dot has a Channel of that type already (409).
	CodeAlreadyExists = "already_exists"
	// CodeChannelOff: a channel type this server does not run (400), with
	// how to turn it on.
	CodeChannelOff = "channel_off"
)

// ChannelWarnings are what a person is told wherever they link a channel
// of a kind (the command line, the web client, the hub's welcome): one
// table, which the web client's generated file holds too.
var ChannelWarnings = map[string]string{
	"telegram": "Telegram chats are not end-to-end encrypted: Telegram can read what you and the Dot write there.",
	"whatsapp": "This is not an official way to use WhatsApp. It links the Dot as a device of a personal account, " +
		"which WhatsApp's terms do not allow for automation, and WhatsApp can restrict or ban the number. " +
		"Use a number of its own (a spare SIM or eSIM), never the one you live on. " +
		"WhatsApp and the account's other devices see what the Dot writes.",
}

// MaxChannelBody bounds a channel route's body.
const MaxChannelBody = 16 << 10

// ChannelKind is a channel type the server runs.
type ChannelKind struct {
	Type string `json:"type"`
	// Name is the service's name to people ("Telegram").
	Name string `json:"name"`
	// LinkedBy is "token" (credentials given) or "code" (a code scanned on
	// a phone).
	LinkedBy string `json:"linked_by"`
}

// ChannelKinds answers GET .../dots/{name}/channels.
type ChannelKinds struct {
	Dot       string        `json:"dot"`
	Available []ChannelKind `json:"available"`
}

// ChannelSettings are a Channel's spec.settings, as a body gives them.
type ChannelSettings struct {
	Approvals     *bool `json:"approvals,omitempty"`
	NotifyTasks   *bool `json:"notifyTasks,omitempty"`
	ShowArguments *bool `json:"showArguments,omitempty"`
}

// ChannelAdd is the body of POST .../dots/{name}/channels.
type ChannelAdd struct {
	Type     string           `json:"type"`
	Token    string           `json:"token"`
	Settings *ChannelSettings `json:"settings,omitempty"`
}

// ChannelCredentials is the body of PUT .../channels/{channel}/credentials.
type ChannelCredentials struct {
	Token string `json:"token"`
}

// ChannelAccount is the account a Channel speaks as.
type ChannelAccount struct {
	ID   string `json:"id"`
	Name string `json:"name,omitempty"`
}

// ChannelLinked answers an add or a new token.
type ChannelLinked struct {
	Namespace string         `json:"namespace"`
	Name      string         `json:"name"`
	Type      string         `json:"type"`
	Account   ChannelAccount `json:"account"`
}

// PairingCode answers POST .../channels/{channel}/pairing-codes.
type PairingCode struct {
	Code      string    `json:"code"`
	ExpiresAt time.Time `json:"expires_at"`
	// Words are what the person sends the account ("/start CODE").
	Words string `json:"words"`
	// Link opens the chat with the words ready to send (empty when the
	// account's public name is not known yet).
	Link string `json:"link,omitempty"`
}

// ChannelLinkFrame is one frame of GET .../channels/{channel}/link (an SSE
// stream, no-store): a code to scan, then linked or failed.
type ChannelLinkFrame struct {
	// Code is a code to show as a QR; it is a way into the account while
	// shown, so it is held in memory only.
	Code string `json:"code,omitempty"`
	// Linked is the account's number once the phone linked it.
	Linked string `json:"linked,omitempty"`
	// Failed says why linking ended without a link.
	Failed string `json:"failed,omitempty"`
}

// ChannelsPath lists the channel kinds the server runs (GET) and adds a
// Channel (POST ChannelAdd).
func ChannelsPath(namespace, dot string) string { return dotPath(namespace, dot) + "/channels" }

// ChannelPath is a Channel of the Dot.
func ChannelPath(namespace, dot, channel string) string {
	return ChannelsPath(namespace, dot) + "/" + url.PathEscape(channel)
}

// IsChannelLinkPath says whether path is a Channel's link stream (GET
// .../channels/{channel}/link), which lasts until the phone linked it.
func IsChannelLinkPath(path string) bool {
	rest, ok := strings.CutPrefix(path, Prefix+"namespaces/")
	if !ok {
		return false
	}
	parts := strings.Split(rest, "/")
	return len(parts) == 6 && parts[0] != "" && parts[1] == "dots" && parts[2] != "" && parts[3] == "channels" && parts[4] != "" && parts[5] == "link"
}
