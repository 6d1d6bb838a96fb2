package hooks

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestVerify(t *testing.T) {
	now := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	body := []byte(`{"action":"opened"}`)
	ghSecret := []byte("gh-secret")
	const stdSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	sign := func(id string, at time.Time, b []byte) string {
		s, err := SignStandard(stdSecret, id, at, b)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	hdr := func(kv ...string) http.Header {
		h := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	ts := func(at time.Time) string { return strconv.FormatInt(at.Unix(), 10) }
	cases := map[string]struct {
		reason  string
		verify  verifyFunc
		secret  []byte
		header  http.Header
		body    []byte
		wantID  string
		wantErr error
	}{
		"github signed": {
			reason: "HMAC-SHA256 of the body in X-Hub-Signature-256 is the sender's proof; the id is X-GitHub-Delivery",
			verify: verifyGitHub, secret: ghSecret, body: body,
			header: hdr("X-Hub-Signature-256", SignGitHub(ghSecret, body), "X-GitHub-Delivery", "d-1"),
			wantID: "d-1",
		},
		"github without id": {
			reason: "a sender that sends no id gets the body's hash as its id",
			verify: verifyGitHub, secret: ghSecret, body: body,
			header: hdr("X-Hub-Signature-256", SignGitHub(ghSecret, body)),
			wantID: deliveryID("", body),
		},
		"github other secret": {
			reason: "a signature made with another secret is refused",
			verify: verifyGitHub, secret: ghSecret, body: body,
			header:  hdr("X-Hub-Signature-256", SignGitHub([]byte("other"), body)),
			wantErr: errBadSignature,
		},
		"github body changed": {
			reason: "the signature covers the body",
			verify: verifyGitHub, secret: ghSecret, body: []byte(`{"action":"closed"}`),
			header:  hdr("X-Hub-Signature-256", SignGitHub(ghSecret, body)),
			wantErr: errBadSignature,
		},
		"github not hex": {
			reason: "a signature that is not hex is refused",
			verify: verifyGitHub, secret: ghSecret, body: body,
			header:  hdr("X-Hub-Signature-256", "sha256=zz"),
			wantErr: errBadSignature,
		},
		"github sha1 only": {
			reason: "the old SHA-1 header alone is no proof",
			verify: verifyGitHub, secret: ghSecret, body: body,
			header:  hdr("X-Hub-Signature", "sha1=00"),
			wantErr: errNoSignature,
		},
		"standard signed": {
			reason: "v1 signature of id.timestamp.body with the whsec_ key; the id is webhook-id",
			verify: verifyStandard, secret: []byte(stdSecret), body: body,
			header: hdr("webhook-id", "msg_1", "webhook-timestamp", ts(now), "webhook-signature", sign("msg_1", now, body)),
			wantID: "msg_1",
		},
		"standard one of several": {
			reason: "a sender rotating keys sends several signatures: one matching is enough",
			verify: verifyStandard, secret: []byte(stdSecret), body: body,
			header: hdr("webhook-id", "msg_1", "webhook-timestamp", ts(now), "webhook-signature", "v1,AAAA v2,xyz "+sign("msg_1", now, body)),
			wantID: "msg_1",
		},
		"standard inside the window": {
			reason: "a timestamp 4 minutes old is in the replay window",
			verify: verifyStandard, secret: []byte(stdSecret), body: body,
			header: hdr("webhook-id", "msg_1", "webhook-timestamp", ts(now.Add(-4*time.Minute)), "webhook-signature", sign("msg_1", now.Add(-4*time.Minute), body)),
			wantID: "msg_1",
		},
		"standard expired": {
			reason: "a well-signed delivery older than the replay window is refused (a capture sent again)",
			verify: verifyStandard, secret: []byte(stdSecret), body: body,
			header:  hdr("webhook-id", "msg_1", "webhook-timestamp", ts(now.Add(-6*time.Minute)), "webhook-signature", sign("msg_1", now.Add(-6*time.Minute), body)),
			wantErr: errOutOfWindow,
		},
		"standard from the future": {
			reason: "a timestamp more than the window ahead is refused too",
			verify: verifyStandard, secret: []byte(stdSecret), body: body,
			header:  hdr("webhook-id", "msg_1", "webhook-timestamp", ts(now.Add(6*time.Minute)), "webhook-signature", sign("msg_1", now.Add(6*time.Minute), body)),
			wantErr: errOutOfWindow,
		},
		"standard timestamp changed": {
			reason: "the timestamp is signed: moving it into the window breaks the signature",
			verify: verifyStandard, secret: []byte(stdSecret), body: body,
			header:  hdr("webhook-id", "msg_1", "webhook-timestamp", ts(now), "webhook-signature", sign("msg_1", now.Add(-time.Hour), body)),
			wantErr: errBadSignature,
		},
		"standard id changed": {
			reason: "the id is signed: a new id for an old delivery breaks the signature",
			verify: verifyStandard, secret: []byte(stdSecret), body: body,
			header:  hdr("webhook-id", "msg_2", "webhook-timestamp", ts(now), "webhook-signature", sign("msg_1", now, body)),
			wantErr: errBadSignature,
		},
		"standard without id": {
			reason: "the scheme requires webhook-id",
			verify: verifyStandard, secret: []byte(stdSecret), body: body,
			header:  hdr("webhook-timestamp", ts(now), "webhook-signature", sign("", now, body)),
			wantErr: errNoID,
		},
		"standard bad timestamp": {
			reason: "a timestamp that is not seconds is refused",
			verify: verifyStandard, secret: []byte(stdSecret), body: body,
			header:  hdr("webhook-id", "msg_1", "webhook-timestamp", "yesterday", "webhook-signature", sign("msg_1", now, body)),
			wantErr: errBadTimestamp,
		},
		"standard secret not base64": {
			reason: "a secret the scheme cannot use refuses every delivery",
			verify: verifyStandard, secret: []byte("whsec_!!!"), body: body,
			header:  hdr("webhook-id", "msg_1", "webhook-timestamp", ts(now), "webhook-signature", sign("msg_1", now, body)),
			wantErr: errBadSecret,
		},
		"token": {
			reason: "the bearer token is the secret; the id is Idempotency-Key",
			verify: verifyToken, secret: []byte("tok-123"), body: body,
			header: hdr("Authorization", "Bearer tok-123", "Idempotency-Key", "k-9", "X-Request-Id", "r-1"),
			wantID: "k-9",
		},
		"token with request id": {
			reason: "without Idempotency-Key, X-Request-Id is the id",
			verify: verifyToken, secret: []byte("tok-123"), body: body,
			header: hdr("Authorization", "Bearer tok-123", "X-Request-Id", "r-1"),
			wantID: "r-1",
		},
		"token without id": {
			reason: "without either, the body's hash is the id",
			verify: verifyToken, secret: []byte("tok-123"), body: body,
			header: hdr("Authorization", "Bearer tok-123"),
			wantID: deliveryID("", body),
		},
		"token wrong": {
			reason: "another token is refused",
			verify: verifyToken, secret: []byte("tok-123"), body: body,
			header:  hdr("Authorization", "Bearer tok-12"),
			wantErr: errBadSignature,
		},
		"token basic": {
			reason: "only a bearer token counts",
			verify: verifyToken, secret: []byte("tok-123"), body: body,
			header:  hdr("Authorization", "Basic tok-123"),
			wantErr: errNoSignature,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			id, err := tc.verify(tc.secret, tc.header, tc.body, now)
			if !errors.Is(err, tc.wantErr) || id != tc.wantID {
				t.Errorf("%s\nverify(%v) = %q, %v; want %q, %v", tc.reason, tc.header, id, err, tc.wantID, tc.wantErr)
			}
		})
	}
}

func TestDeliveryIDIsBounded(t *testing.T) {
	if got := deliveryID(strings.Repeat("x", 1000), nil); len(got) != maxIDLength {
		t.Errorf("a 1000-byte id is kept as %d bytes; want %d", len(got), maxIDLength)
	}
}

func TestNewSecret(t *testing.T) {
	for _, sig := range []string{"github", "standard", "token"} {
		a, err := NewSecret(sig)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := NewSecret(sig)
		if a == b || len(a) < 40 {
			t.Errorf("NewSecret(%s) = %q then %q: want two different secrets of 40 characters or more", sig, a, b)
		}
		if sig == "standard" {
			if _, err := SignStandard(a, "x", time.Now(), nil); err != nil {
				t.Errorf("NewSecret(standard) = %q, which Standard Webhooks cannot use: %v", a, err)
			}
		}
	}
}
