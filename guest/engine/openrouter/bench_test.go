package openrouter

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// BenchmarkCompleteStream measures the client's side of one streamed answer
// of 1000 text chunks and a tool call in 20 pieces from a loopback stand-in
// that answers at once: the overhead the engine adds to every model request.
func BenchmarkCompleteStream(b *testing.B) {
	var body strings.Builder
	for i := 0; i < 1000; i++ {
		fmt.Fprintf(&body, "data: {\"choices\":[{\"delta\":{\"content\":\"word%d \"}}]}\n\n", i)
	}
	body.WriteString("data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c\",\"function\":{\"name\":\"exec\",\"arguments\":\"\"}}]}}]}\n\n")
	for i := 0; i < 20; i++ {
		body.WriteString("data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"xxxxxxxx\"}}]}}]}\n\n")
	}
	body.WriteString("data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n")
	body.WriteString("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":1000,\"cost\":0.001}}\n\ndata: [DONE]\n\n")
	payload := body.String()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write([]byte(payload))
	}))
	defer srv.Close()
	c := New(srv.URL, srv.Client())
	req := Request{Model: "m", Messages: []Message{{Role: "user", Content: "go"}}}
	b.SetBytes(int64(len(payload)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		resp, err := c.Complete(context.Background(), "k", req)
		if err != nil || len(resp.ToolCalls) != 1 {
			b.Fatalf("Complete: %v %+v", err, resp.ToolCalls)
		}
	}
	b.ReportMetric(float64(b.N*1021)/b.Elapsed().Seconds(), "chunks/s")
}
