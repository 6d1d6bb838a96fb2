package guestclient

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"testing"
	"time"
)

// FuzzProofAnswer: whatever a listener answers to the proof, the client
// refuses it as unproven or not answering (the nonce is fresh, so no
// fuzzed answer can hold its proof), and never sends the token.
func FuzzProofAnswer(f *testing.F) {
	f.Add([]byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 15\r\n\r\n{\"proof\":\"ab\"}\n"))
	f.Add([]byte("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"))
	f.Add([]byte("HTTP/1.1 401 Unauthorized\r\nConnection: close\r\n\r\n"))
	f.Add([]byte("SSH-2.0-OpenSSH_9.2\r\n"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, answer []byte) {
		client, server := net.Pipe()
		defer client.Close()
		go func() {
			defer server.Close()
			server.SetDeadline(time.Now().Add(2 * time.Second))
			if _, err := http.ReadRequest(bufio.NewReader(server)); err != nil {
				return
			}
			server.Write(answer)
		}()
		client.SetDeadline(time.Now().Add(2 * time.Second))
		_, err := prove(client, "127.0.0.1:1", token)
		if err == nil {
			t.Fatalf("a fuzzed answer passed the proof: %q", answer)
		}
		if !errors.Is(err, ErrGuestUnproven) && !errors.Is(err, ErrGuestNotAnswering) {
			t.Fatalf("prove = %v, want unproven or not answering", err)
		}
	})
}
