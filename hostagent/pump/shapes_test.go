package pump

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// guestShapes is the file the guest writes from its own event types, one
// event of every outbound type with each set of its optional keys
// (guest/protocol's TestWireShapesFileIsCurrent keeps it current).
var guestShapes = filepath.FromSlash("../../guest/protocol/testdata/outbound-events.jsonl")

// TestGuestShapesAreRead reads every event the guest writes as the host
// reads its stream: the envelope taken strictly (eventOf), the protocol's
// parse (ParseOutbound), and the data parsed back unchanged, so a key the
// host would strip or refuse fails here (ref 5.4: drift is caught on both
// sides; the guest's side is guest/protocol's TestWireShapesRoundTrip).
func TestGuestShapesAreRead(t *testing.T) {
	raw, err := os.ReadFile(guestShapes)
	if err != nil {
		t.Fatalf("read the guest's shapes: %v", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	types := map[string]bool{}
	n := 0
	for sc.Scan() {
		n++
		line := append([]byte(nil), sc.Bytes()...)
		var seq struct {
			Seq int64 `json:"seq"`
		}
		if err := json.Unmarshal(line, &seq); err != nil {
			t.Fatalf("line %d does not read: %v", n, err)
		}
		ev, problem := eventOf(message{id: strconv.FormatInt(seq.Seq, 10), data: line})
		if problem != "" {
			t.Errorf("line %d: the host refuses the envelope: %s", n, problem)
			continue
		}
		types[ev.Type] = true
		parsed, err := protocol.ParseOutbound(ev)
		if err != nil {
			t.Errorf("line %d (%s): the host refuses it: %v", n, ev.Type, err)
			continue
		}
		again, err := json.Marshal(parsed)
		if err != nil {
			t.Fatal(err)
		}
		var want bytes.Buffer
		if err := json.Compact(&want, ev.Data); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want.String(), string(again)); diff != "" {
			t.Errorf("line %d (%s): the host does not read it back unchanged (-guest +host):\n%s", n, ev.Type, diff)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	for _, typ := range protocol.OutboundTypes {
		if !types[typ] {
			t.Errorf("the guest's shapes hold no %s event", typ)
		}
	}
}
