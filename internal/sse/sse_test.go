package sse

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestReader(t *testing.T) {
	big := strings.Repeat("x", 40)
	tests := map[string]struct {
		stream string
		want   []Message
	}{
		"messages":         {"id: 1\ndata: {\"a\":1}\n\nid: 2\ndata: {}\n\n", []Message{{ID: "1", HasID: true, Data: []byte(`{"a":1}`)}, {ID: "2", HasID: true, Data: []byte(`{}`)}}},
		"lines joined":     {"id: 3\ndata: a\ndata: b\n\n", []Message{{ID: "3", HasID: true, Data: []byte("a\nb")}}},
		"crlf, no space":   {"id:4\r\nevent:x\r\ndata:{}\r\n\r\n", []Message{{ID: "4", HasID: true, Event: "x", Data: []byte("{}")}}},
		"comments skipped": {": keep-alive\n\n: another\nid: 5\n\n", []Message{{ID: "5", HasID: true}}},
		"cut at the end":   {"id: 1\ndata: {}\n\nid: 2\ndata: {\"tr", []Message{{ID: "1", HasID: true, Data: []byte("{}")}}},
		"a line too long":  {"id: 6\ndata: " + big + "\n\nid: 7\ndata: ok\n\n", []Message{{ID: "6", HasID: true, TooLarge: true}, {ID: "7", HasID: true, Data: []byte("ok")}}},
		"data too long":    {"id: 8\ndata: " + big[:20] + "\ndata: " + big[:20] + "\n\n", []Message{{ID: "8", HasID: true, TooLarge: true}}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := NewReader(strings.NewReader(tc.stream), 32)
			var got []Message
			for {
				m, err := r.Next()
				if err != nil {
					if !errors.Is(err, io.EOF) {
						t.Fatalf("Next = %v; want io.EOF at the end", err)
					}
					break
				}
				got = append(got, m)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("messages (-want +got):\n%s", diff)
			}
		})
	}
}
