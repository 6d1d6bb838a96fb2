package hooks

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
)

// NewSecret is a new random secret for a Webhook of the scheme sig: 32
// random bytes, as "whsec_" and base64 for standard (the form Standard
// Webhooks senders take), as hex for github and token.
func NewSecret(sig string) (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("make a secret: %w", err)
	}
	switch dotsv1.WebhookSignature(sig) {
	case dotsv1.WebhookStandard:
		return "whsec_" + base64.StdEncoding.EncodeToString(b), nil
	case dotsv1.WebhookGitHub, dotsv1.WebhookToken:
		return hex.EncodeToString(b), nil
	}
	return "", fmt.Errorf("%q is not a signature scheme: github, standard or token", sig)
}
