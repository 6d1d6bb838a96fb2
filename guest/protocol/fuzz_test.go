package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"testing"
)

// The fuzzers of what crosses the guest boundary and is parsed here. Each
// runs its committed corpus (testdata/fuzz) in every `go test`, for a few
// seconds in `make test` and for longer in `make fuzz`.

func FuzzProcFrames(f *testing.F) {
	var seed bytes.Buffer
	WriteFrame(&seed, FrameInput, []byte("ls -l\n"))
	WriteFrame(&seed, FrameResize, ResizePayload(TTYSize{Cols: 120, Rows: 40}))
	WriteFrame(&seed, FrameSignal, SignalPayload(15))
	WriteFrame(&seed, FrameEOF, nil)
	f.Add(seed.Bytes())
	f.Add([]byte{FrameInput, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{FrameExit, 0, 0, 0, 5, '{', '}'})
	f.Fuzz(func(t *testing.T, stream []byte) {
		r := bytes.NewReader(stream)
		for {
			typ, payload, err := ReadFrame(r)
			if err != nil {
				if errors.Is(err, io.EOF) && r.Len() != 0 {
					t.Fatalf("EOF with %d bytes unread", r.Len())
				}
				return
			}
			if len(payload) > ProcMaxFrame {
				t.Fatalf("a frame of %d bytes passed the %d-byte limit", len(payload), ProcMaxFrame)
			}
			var again bytes.Buffer
			if err := WriteFrame(&again, typ, payload); err != nil {
				t.Fatalf("a frame read does not write: %v", err)
			}
			typ2, payload2, err := ReadFrame(&again)
			if err != nil || typ2 != typ || !bytes.Equal(payload, payload2) {
				t.Fatalf("frame %q does not round-trip", typ)
			}
			switch typ {
			case FrameResize:
				if size, err := ParseResize(payload); err == nil && !bytes.Equal(ResizePayload(size), payload) {
					t.Fatalf("resize %x does not round-trip", payload)
				}
			case FrameSignal:
				if sig, err := ParseSignal(payload); err == nil && (sig < 1 || sig > 64) {
					t.Fatalf("signal %d passed", sig)
				}
			case FrameExit:
				var x ProcExit
				_ = json.Unmarshal(payload, &x)
			}
		}
	})
}

func FuzzParseOutbound(f *testing.F) {
	for _, ev := range wireShapes() {
		f.Add(ev.Seq, ev.ID, ev.Type, ev.TS, []byte(ev.Data))
	}
	f.Add(int64(1), "e", EventToolCalled, "t", []byte(`{"tool":1}`))
	f.Add(int64(0), "", "", "", []byte(`null`))
	f.Fuzz(func(t *testing.T, seq int64, id, typ, ts string, data []byte) {
		ev := OutboundEvent{Seq: seq, ID: id, Type: typ, TS: ts, Data: data}
		out, err := ParseOutbound(ev)
		if err != nil {
			return
		}
		if seq <= 0 || id == "" || ts == "" {
			t.Fatalf("ParseOutbound took %+v", ev)
		}
		if _, err := json.Marshal(out); err != nil {
			t.Fatalf("a parsed %s does not encode: %v", typ, err)
		}
	})
}

func FuzzParseInbound(f *testing.F) {
	f.Add("m1", InboundUserMessage, "2026-11-30T12:00:00Z", []byte(`{"text":"hello"}`))
	f.Add("t1", InboundTaskCreated, "2026-11-30T12:00:00Z", []byte(`{"task_id":"t","description":"d","priority":"normal"}`))
	f.Add("a1", InboundApprovalReceived, "2026-11-30T12:00:00Z", []byte(`{"approval_id":"a","decision":"approve"}`))
	f.Add("x", "nope", "", []byte(`[]`))
	f.Fuzz(func(t *testing.T, id, typ, ts string, data []byte) {
		ev := InboundEvent{ID: id, Type: typ, TS: ts, Data: data}
		out, err := ParseInbound(ev)
		if err != nil {
			return
		}
		if _, err := json.Marshal(out); err != nil {
			t.Fatalf("a parsed %s does not encode: %v", typ, err)
		}
	})
}

func FuzzRuntimeConfig(f *testing.F) {
	f.Add([]byte(`{"name":"helper","model":{"provider":"openrouter","id":"m"},"permissions":{"computer.exec":"ask"},"limits":{}}`))
	f.Add([]byte(`{"name":"helper","model":{"provider":"openrouter","id":"m"},"permissions":{"mcp.s":"allow"},"limits":{"max_steps_per_task":5},"mcp_servers":{"s":{"url":"https://x","headers":{"A":"b"},"secrets":["Authorization"]}}}`))
	f.Add([]byte(`{"name":"helper","model":{"provider":"openrouter","id":"m"},"permissions":{},"limits":{"max_steps_per_task":0}}`))
	f.Add([]byte(`{} {}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		c, err := DecodeRuntimeConfig(body)
		if err != nil {
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("a decoded config is not valid: %v", err)
		}
		again, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		c2, err := DecodeRuntimeConfig(again)
		if err != nil {
			t.Fatalf("a decoded config does not decode again: %v\n%s", err, again)
		}
		// Compared as encoded: an empty map and no map are the same config.
		if again2, _ := json.Marshal(c2); !bytes.Equal(again, again2) {
			t.Fatalf("a config changes when encoded and decoded again:\n%s\n%s", again, again2)
		}
	})
}

func FuzzDecodeJSON(f *testing.F) {
	f.Add([]byte(`{"command":"ls","cwd":"work","timeout_ms":5000}`))
	f.Add([]byte(`{"command":"ls"} {"command":"rm"}`))
	f.Add([]byte(`{"command":"ls","extra":1}`))
	f.Add([]byte(`{"Command":"ls","CWD":"work"}`))
	f.Add([]byte(`{"openrouter_api_key":"sk-or-1","mcp_secrets":{"s":{"A":"b"}}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var exec ExecRequest
		err := DecodeJSON(bytes.NewReader(body), 1<<10, &exec)
		var de *DecodeError
		if err != nil && !errors.As(err, &de) {
			t.Fatalf("DecodeJSON's error is %T, not a *DecodeError", err)
		}
		if err == nil && len(body) > 1<<10 {
			t.Fatalf("a body of %d bytes passed the limit", len(body))
		}
		if err == nil {
			// Every key of a body taken is one of the route's, exactly
			// (encoding/json alone would take one in another case).
			var keys map[string]json.RawMessage
			if json.Unmarshal(body, &keys) == nil {
				for k := range keys {
					if k != "command" && k != "cwd" && k != "timeout_ms" {
						t.Fatalf("a body with the key %q passed as an ExecRequest: %q", k, body)
					}
				}
			}
		}
		var secrets SecretsRequest
		if err := DecodeBytes(body, &secrets); err == nil {
			_ = secrets.Validate()
		}
	})
}
