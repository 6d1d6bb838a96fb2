package channels

import (
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"net/url"
	"strings"
	"time"
)

// A pairing code pairs the person who sends it with a Dot's channel, once
// (ref 9.8): eight symbols of Crockford's base32 (40 bits), valid ten
// minutes, used once, and stored only as its SHA-256 hash, so the table
// holds nothing a reader could pair with.
const (
	PairingCodeLength   = 8
	PairingCodeLifetime = 10 * time.Minute
)

// crockford is Crockford's base32 alphabet: no I, L, O or U, so a code read
// aloud or copied by hand is not misread.
const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// NewPairingCode is a fresh code and the hash it is stored as.
func NewPairingCode() (code string, hash [sha256.Size]byte) {
	var b [PairingCodeLength]byte
	_, _ = rand.Read(b[:]) // crypto/rand never fails (Go 1.24)
	out := make([]byte, PairingCodeLength)
	for i, v := range b {
		out[i] = crockford[v&31]
	}
	code = string(out)
	return code, HashPairingCode(code)
}

// ErrNotAPairingCode: the text is not a code's shape, so no hash is looked
// up for it.
var ErrNotAPairingCode = errors.New("not a pairing code")

// NormalizePairingCode reads a code as a person may type it: any case,
// spaces and dashes between the symbols, and the letters Crockford's
// alphabet reads as digits (O as 0; I and L as 1).
func NormalizePairingCode(s string) (string, error) {
	var out strings.Builder
	for _, r := range strings.ToUpper(s) {
		switch r {
		case ' ', '-':
			continue
		case 'O':
			r = '0'
		case 'I', 'L':
			r = '1'
		}
		if !strings.ContainsRune(crockford, r) {
			return "", ErrNotAPairingCode
		}
		out.WriteRune(r)
	}
	if out.Len() != PairingCodeLength {
		return "", ErrNotAPairingCode
	}
	return out.String(), nil
}

// HashPairingCode is what a code is stored and looked up as.
func HashPairingCode(code string) [sha256.Size]byte {
	if n, err := NormalizePairingCode(code); err == nil {
		code = n
	}
	return sha256.Sum256([]byte(code))
}

// StartCode reads a pairing message as a code, false for anything else:
// Telegram's "/start CODE" (what the t.me deep link sends, and what a
// person may type) and WhatsApp's "pair CODE" (what the wa.me link fills
// in). A bare /start and every other text are no pairing attempt and get
// no answer.
func StartCode(text string) (string, bool) {
	cmd, arg, ok := strings.Cut(strings.TrimSpace(text), " ")
	if !ok || (cmd != "/start" && !strings.HasPrefix(cmd, "/start@") && !strings.EqualFold(cmd, "pair")) {
		return "", false
	}
	code, err := NormalizePairingCode(strings.TrimSpace(arg))
	return code, err == nil
}

// PairingWords are what a person sends the Dot's account on a channel of
// kind to pair with code.
func PairingWords(kind, code string) string {
	if kind == "whatsapp" {
		return "pair " + code
	}
	return "/start " + code
}

// PairingLink opens the chat with the account with the words ready to send
// (a t.me deep link for a bot's username, a wa.me link for a number); empty
// when the account's public name is not known.
func PairingLink(kind, account, code string) string {
	if account == "" {
		return ""
	}
	switch kind {
	case "telegram":
		return "https://t.me/" + url.PathEscape(account) + "?start=" + url.QueryEscape(code)
	case "whatsapp":
		number := strings.TrimPrefix(account, "+")
		// %20, not +, for the space: WhatsApp's own links spell it so,
		// and some clients show a + as it is.
		return "https://wa.me/" + url.PathEscape(number) + "?text=" + url.PathEscape(PairingWords(kind, code))
	}
	return ""
}
