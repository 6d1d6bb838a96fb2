package tools

import (
	"encoding/json"
	"strings"
	"testing"
)

// BenchmarkExecThroughRealAgentd is what one exec of `true` costs through
// the relay and the real dot-agentd's POST /v1/proc (bash -lc included): the
// floor of every command the model runs.
func BenchmarkExecThroughRealAgentd(b *testing.B) {
	f := newRealFixture(b)
	raw, _ := json.Marshal(map[string]any{"command": "true"})
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if res := f.runner.Run(b.Context(), "exec", raw); !res.OK {
			b.Fatalf("exec: %+v", res)
		}
	}
}

// BenchmarkReadFileThroughRealAgentd is one read_file of a 100-line file
// through the real dot-agentd's file route.
func BenchmarkReadFileThroughRealAgentd(b *testing.B) {
	f := newRealFixture(b)
	f.write(b, "r.txt", strings.Repeat("some text on a line\n", 100))
	raw, _ := json.Marshal(map[string]any{"path": "r.txt"})
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if res := f.runner.Run(b.Context(), "read_file", raw); !res.OK {
			b.Fatalf("read_file: %+v", res)
		}
	}
}

// BenchmarkScreenText renders terminal output with colours and progress
// lines, the work of every poll of a terminal session.
func BenchmarkScreenText(b *testing.B) {
	chunk := []byte(strings.Repeat("\x1b[32mok\x1b[0m step 10%\rstep 100%\r\n", 200))
	b.SetBytes(int64(len(chunk)))
	var s screenText
	for i := 0; i < b.N; i++ {
		s.feed(chunk)
	}
}
