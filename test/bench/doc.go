// Package bench measures the control plane as a person meets it: the real
// invisible-dots binary runs as a subprocess on a throwaway home, and the
// benchmarks drive it through client-go, read its memory from /proc and its
// database through PostgreSQL's unix socket.
//
// It deliberately links neither internal/apiserver nor test/harness, so the
// server's resident memory is that of the shipped process, not of a test
// binary that also holds the API server.
//
// `make bench` builds the binary and runs BenchmarkControlPlane once
// (-benchtime=1x). The benchmarks measure and print; nothing here asserts a
// timing (DESIGN.md 7). Without -bench, `go test` runs only the quick unit
// tests of the helpers.
package bench
