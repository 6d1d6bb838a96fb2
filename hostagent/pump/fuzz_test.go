package pump

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"unicode/utf8"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// FuzzEventStream: whatever a guest writes on its event stream, the frames
// read are whole messages with a seq of 0 or more, and each becomes an
// event to store or one to store as refused.
func FuzzEventStream(f *testing.F) {
	f.Add([]byte("id: 1\ndata: {\"seq\":1,\"id\":\"e1\",\"type\":\"agent.started\",\"ts\":\"t\",\"data\":{}}\n\n: keep-alive\n\n"))
	f.Add([]byte("id: 2\ndata: {\"seq\":2,\ndata: \"id\":\"e2\"}\n\nid: x\ndata: nope\n\n"))
	f.Add([]byte("data: {}\r\n\r\nid: -5\ndata: null\n\n"))
	f.Add([]byte("id: 3\ndata: {\"Seq\":3,\"id\":\"e3\",\"Type\":\"agent.started\",\"ts\":\"t\",\"data\":{},\"via\":1}\n\n"))
	f.Add([]byte("id: 9223372036854775807\ndata: {\"seq\":1,\"id\":\"e\",\"type\":\"guest.outbox.reset\",\"ts\":\"t\",\"data\":{\"cursor\":3,\"last_seq\":1}}\n\n"))
	f.Fuzz(func(t *testing.T, stream []byte) {
		out := make(chan message, 1024)
		done := make(chan error, 1)
		go func() {
			done <- readStream(context.Background(), bytes.NewReader(stream), out)
			close(out)
		}()
		n := 0
		for m := range out {
			n++
			if len(m.data) > maxEventBytes {
				t.Fatalf("a message of %d bytes was handed on", len(m.data))
			}
			ev, problem := eventOf(m)
			if ev.Seq < 0 {
				t.Fatalf("seq %d from id %q", ev.Seq, m.id)
			}
			if problem == "" && len(ev.Data) == 0 {
				t.Fatal("an event without data")
			}
			if problem != "" && !utf8.Valid(ev.Data) {
				t.Fatalf("a refused message's data is not text: %q", ev.Data)
			}
			if problem == "" {
				_, _ = protocol.ParseOutbound(ev)
				// An event taken has the envelope's keys, exactly.
				var keys map[string]json.RawMessage
				if json.Unmarshal(m.data, &keys) == nil {
					for k := range keys {
						if k != "seq" && k != "id" && k != "type" && k != "ts" && k != "data" {
							t.Fatalf("a message with the key %q was taken as an event: %q", k, m.data)
						}
					}
				}
			}
		}
		<-done
		if n > len(stream) {
			t.Fatalf("%d messages from %d bytes", n, len(stream))
		}
	})
}
