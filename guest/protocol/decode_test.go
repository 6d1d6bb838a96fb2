package protocol

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// decodeShape has every kind of place a key can stand: a nested struct, a
// pointer, a slice and a map of structs, an embedded struct, a field that
// decodes itself, a renamed and a skipped field.
type decodeShape struct {
	Name   string                     `json:"name"`
	Inner  decodeInner                `json:"inner"`
	Ptr    *decodeInner               `json:"ptr,omitempty"`
	List   []decodeInner              `json:"list"`
	ByName map[string]decodeInner     `json:"by_name"`
	Raw    json.RawMessage            `json:"raw"`
	Free   map[string]any             `json:"free"`
	Skip   string                     `json:"-"`
	Dash   string                     `json:"-,"`
	Plain  int                        // no tag: its Go name
	Nested map[string]map[string]bool `json:"nested"`
	decodeEmbedded
}

type decodeInner struct {
	ID string `json:"id"`
}

type decodeEmbedded struct {
	Extra string `json:"extra"`
}

func TestDecodeJSON(t *testing.T) {
	tests := map[string]struct {
		reason  string
		body    string
		want    *DecodeProblem
		wantMsg string
	}{
		"exact keys":      {reason: "every key as the type names it", body: `{"name":"a","inner":{"id":"x"},"ptr":{"id":"y"},"list":[{"id":"z"}],"by_name":{"K":{"id":"w"}},"raw":{"Any":1},"free":{"Any":{"Thing":1}},"-":"d","Plain":1,"nested":{"A":{"B":true}},"extra":"e"}`},
		"white space":     {reason: "white space after the value is not more data", body: "{\"name\":\"a\"}\n\t "},
		"unknown field":   {reason: "a field the type does not have", body: `{"name":"a","nmae":"b"}`, want: ptr(BodyUnknownField), wantMsg: `unknown field "nmae"`},
		"another case":    {reason: "encoding/json folds case; the protocol does not", body: `{"Name":"a"}`, want: ptr(BodyUnknownField), wantMsg: `unknown field "Name" (keys are matched exactly: the field is "name")`},
		"all capitals":    {reason: "any case but the exact one", body: `{"NAME":"a"}`, want: ptr(BodyUnknownField), wantMsg: `"NAME"`},
		"nested struct":   {reason: "keys are checked at every depth", body: `{"inner":{"Id":"x"}}`, want: ptr(BodyUnknownField), wantMsg: `"Id"`},
		"through pointer": {reason: "a pointer field's struct", body: `{"ptr":{"iD":"x"}}`, want: ptr(BodyUnknownField), wantMsg: `"iD"`},
		"in a list":       {reason: "each element of a list of structs", body: `{"list":[{"id":"x"},{"ID":"y"}]}`, want: ptr(BodyUnknownField), wantMsg: `"ID"`},
		"in a map value":  {reason: "a map's keys are free, its struct values' are not", body: `{"by_name":{"Free Key":{"Id":"x"}}}`, want: ptr(BodyUnknownField), wantMsg: `"Id"`},
		"embedded":        {reason: "a promoted field of an embedded struct", body: `{"Extra":"e"}`, want: ptr(BodyUnknownField), wantMsg: `"Extra"`},
		"untagged field":  {reason: "an untagged field's key is its Go name, exactly", body: `{"plain":1}`, want: ptr(BodyUnknownField), wantMsg: `"plain"`},
		"skipped field":   {reason: "a field tagged - has no key", body: `{"Skip":"s"}`, want: ptr(BodyUnknownField), wantMsg: `"Skip"`},
		"trailing value":  {reason: "a body is one JSON value", body: `{"name":"a"} {"name":"b"}`, want: ptr(BodyTrailing)},
		"trailing bytes":  {reason: "a body is one JSON value", body: `{"name":"a"}x`, want: ptr(BodyTrailing)},
		"not json":        {reason: "syntax", body: `{"name":`, want: ptr(BodyMalformed)},
		"wrong type":      {reason: "shape", body: `{"name":1}`, want: ptr(BodyMalformed), wantMsg: "field name must be string, not number"},
		"over the limit":  {reason: "the limit is the route's", body: `{"name":"` + strings.Repeat("a", 600) + `"}`, want: ptr(BodyTooLarge)},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var v decodeShape
			err := DecodeJSON(strings.NewReader(tc.body), 512, &v)
			var got *DecodeProblem
			var de *DecodeError
			if errors.As(err, &de) {
				got = &de.Problem
			} else if err != nil {
				t.Fatalf("%s: DecodeJSON(%s) = %T %v, want a *DecodeError", tc.reason, tc.body, err, err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Fatalf("%s: DecodeJSON(%s) = %v; problem (-want +got):\n%s", tc.reason, tc.body, err, diff)
			}
			if tc.wantMsg != "" && !strings.Contains(err.Error(), tc.wantMsg) {
				t.Errorf("%s: DecodeJSON(%s) = %q, want it to hold %q", tc.reason, tc.body, err, tc.wantMsg)
			}
		})
	}
}

// TestDecodeJSONProtocolTypes: the routes' own bodies refuse a key in
// another case as they refuse an unknown one.
func TestDecodeJSONProtocolTypes(t *testing.T) {
	tests := map[string]struct {
		body string
		into any
	}{
		"exec":    {`{"Command":"ls"}`, &ExecRequest{}},
		"secrets": {`{"OpenRouter_API_Key":"sk-or-1"}`, &SecretsRequest{}},
		"config":  {`{"name":"x","model":{"provider":"openrouter","Id":"m"},"permissions":{},"limits":{}}`, &RuntimeConfig{}},
		"event":   {`{"id":"e1","Type":"message.user","ts":"2026-11-30T12:00:00Z","data":{"text":"hi"}}`, &InboundEvent{}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := DecodeBytes([]byte(tc.body), tc.into)
			var de *DecodeError
			if !errors.As(err, &de) || de.Problem != BodyUnknownField {
				t.Fatalf("DecodeBytes(%s) = %v, want an unknown field", tc.body, err)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }
