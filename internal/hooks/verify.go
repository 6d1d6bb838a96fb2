package hooks

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
)

// Why a delivery is refused. They go to the Webhook's status (for its
// owner), never to the sender, who reads one refusal for every reason.
var (
	errNoSignature  = errors.New("the delivery carries no signature")
	errBadSignature = errors.New("the signature does not match the secret")
	errNoID         = errors.New("the delivery carries no id")
	errBadTimestamp = errors.New("the delivery's timestamp is not a number of seconds")
	errOutOfWindow  = errors.New("the delivery's timestamp is outside the replay window (5 minutes)")
	errBadSecret    = errors.New("the Webhook's secret is not one its scheme takes")
	errTooLarge     = errors.New("the delivery's body is larger than 1 MiB")
)

// ReplayWindow is how far a Standard Webhooks delivery's timestamp may be
// from now, either way: a delivery captured and sent again later is
// refused, as the scheme asks.
const ReplayWindow = 5 * time.Minute

// maxIDLength bounds a delivery id: it becomes a hash, an annotation cut to
// this length, and never more.
const maxIDLength = 200

// verifyFunc checks a delivery's proof against secret, in constant time,
// before its body is parsed, and returns its delivery id.
type verifyFunc func(secret []byte, h http.Header, body []byte, now time.Time) (string, error)

// verifiers are the schemes, by the Webhook's spec.signature.
var verifiers = map[dotsv1.WebhookSignature]verifyFunc{
	dotsv1.WebhookGitHub:   verifyGitHub,
	dotsv1.WebhookStandard: verifyStandard,
	dotsv1.WebhookToken:    verifyToken,
}

// verifyGitHub is GitHub's scheme: X-Hub-Signature-256 is "sha256=" and
// the hex of HMAC-SHA256(secret, body); the id is X-GitHub-Delivery, else
// a hash of the body (a sender of the same scheme that sends no id).
func verifyGitHub(secret []byte, h http.Header, body []byte, _ time.Time) (string, error) {
	sig, ok := strings.CutPrefix(h.Get("X-Hub-Signature-256"), "sha256=")
	if !ok || sig == "" {
		return "", errNoSignature
	}
	got, err := hex.DecodeString(sig)
	if err != nil {
		return "", errBadSignature
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	if !hmac.Equal(got, mac.Sum(nil)) {
		return "", errBadSignature
	}
	return deliveryID(h.Get("X-GitHub-Delivery"), body), nil
}

// verifyStandard is the Standard Webhooks scheme (standardwebhooks.com):
// the secret is "whsec_" and the base64 of the key; webhook-signature is a
// space-separated list of "v1,<base64 of HMAC-SHA256(key, id.timestamp.body)>"
// (any one matching is enough, so a sender rotating keys signs with both);
// webhook-timestamp is Unix seconds, within ReplayWindow of now; the id is
// webhook-id, which the scheme requires.
func verifyStandard(secret []byte, h http.Header, body []byte, now time.Time) (string, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(string(secret), "whsec_"))
	if err != nil || len(key) == 0 {
		return "", errBadSecret
	}
	id, ts, sigs := h.Get("webhook-id"), h.Get("webhook-timestamp"), h.Get("webhook-signature")
	if sigs == "" {
		return "", errNoSignature
	}
	if id == "" {
		return "", errNoID
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return "", errBadTimestamp
	}
	if d := now.Sub(time.Unix(sec, 0)); d > ReplayWindow || d < -ReplayWindow {
		return "", errOutOfWindow
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(body)
	want := mac.Sum(nil)
	matched := 0
	for _, s := range strings.Fields(sigs) {
		v, b64, ok := strings.Cut(s, ",")
		if !ok || v != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			continue
		}
		// Every candidate is compared: the time taken does not say which
		// one matched.
		matched |= subtle.ConstantTimeCompare(got, want)
	}
	if matched != 1 {
		return "", errBadSignature
	}
	return deliveryID(id, body), nil
}

// verifyToken is a bearer token: "Authorization: Bearer <secret>". The id
// is Idempotency-Key, else X-Request-Id, else a hash of the body (the same
// body sent twice makes one Task).
func verifyToken(secret []byte, h http.Header, body []byte, _ time.Time) (string, error) {
	tok, ok := strings.CutPrefix(h.Get("Authorization"), "Bearer ")
	if !ok || tok == "" {
		return "", errNoSignature
	}
	// Compared as hashes, so the time taken says nothing of the length.
	got, want := sha256.Sum256([]byte(tok)), sha256.Sum256(secret)
	if subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
		return "", errBadSignature
	}
	id := h.Get("Idempotency-Key")
	if id == "" {
		id = h.Get("X-Request-Id")
	}
	return deliveryID(id, body), nil
}

// deliveryID is the sender's id, or "sha256:" and the body's hash when it
// sent none, cut to maxIDLength.
func deliveryID(id string, body []byte) string {
	if id == "" {
		sum := sha256.Sum256(body)
		return "sha256:" + hex.EncodeToString(sum[:])
	}
	if len(id) > maxIDLength {
		id = id[:maxIDLength]
	}
	return id
}

// SignGitHub is X-Hub-Signature-256's value for body (for the command
// line's example and the tests).
func SignGitHub(secret, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// SignStandard is webhook-signature's value for a delivery id sent at ts.
func SignStandard(secret string, id string, ts time.Time, body []byte) (string, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return "", fmt.Errorf("the secret is not whsec_ and base64: %w", err)
	}
	mac := hmac.New(sha256.New, key)
	fmt.Fprintf(mac, "%s.%d.", id, ts.Unix())
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil)), nil
}
