package protocol

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
)

// ProofPrefix is the fixed text the proof HMAC covers before the nonce
// (ref 5.1).
const ProofPrefix = "invisible-dots guest proof v1\n"

// ProofNonceBytes is how many random bytes the host sends, hex-encoded, as the
// nonce of GET /v1/proof.
const ProofNonceBytes = 16

// ComputeProof returns hex(HMAC-SHA256(token, ProofPrefix + nonce)).
func ComputeProof(token, nonce string) string {
	mac := hmac.New(sha256.New, []byte(token))
	mac.Write([]byte(ProofPrefix))
	mac.Write([]byte(nonce))
	return hex.EncodeToString(mac.Sum(nil))
}

// ProofMatches compares an answered proof with the expected one in constant
// time.
func ProofMatches(token, nonce, answered string) bool {
	want := ComputeProof(token, nonce)
	return hmac.Equal([]byte(want), []byte(answered))
}
