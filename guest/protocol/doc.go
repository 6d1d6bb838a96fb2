// Package protocol holds what the host and the guest must agree on, byte for
// byte: the wire types of the host-to-guest protocol (ref 5), the Dot
// configuration rules both sides apply (ref 7), and the proof that lets the
// host tell a real guest from any other listener (ref 5.1).
//
// It imports nothing outside the standard library, so the static guest
// binaries (dot-agentd, dot-engine) and the control plane share one copy.
// Each rule has one home here; the CRD markers in api/v1alpha1 are checked
// against these tables by a test, so the API server and the guest cannot drift.
package protocol
