package protocol

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestFramesRoundTrip(t *testing.T) {
	frames := []struct {
		typ     byte
		payload []byte
	}{
		{FrameInput, []byte("hello\n")},
		{FrameEOF, nil},
		{FrameResize, ResizePayload(TTYSize{Cols: 132, Rows: 43})},
		{FrameSignal, SignalPayload(15)},
		{FrameOutput, bytes.Repeat([]byte{0xff}, 70000)},
		{FrameErrOutput, []byte("oops")},
		{FrameExit, []byte(`{"exit_code":143,"signal":15}`)},
	}
	var buf bytes.Buffer
	for _, f := range frames {
		if err := WriteFrame(&buf, f.typ, f.payload); err != nil {
			t.Fatalf("WriteFrame(%q): %v", f.typ, err)
		}
	}
	for _, want := range frames {
		typ, payload, err := ReadFrame(&buf)
		if err != nil {
			t.Fatalf("ReadFrame: %v", err)
		}
		if typ != want.typ || !bytes.Equal(payload, want.payload) && len(want.payload) > 0 {
			t.Fatalf("ReadFrame = %q (%d bytes), want %q (%d bytes)", typ, len(payload), want.typ, len(want.payload))
		}
	}
	if _, _, err := ReadFrame(&buf); err != io.EOF {
		t.Fatalf("ReadFrame at the end = %v, want io.EOF", err)
	}
}

func TestFrameRefusals(t *testing.T) {
	if err := WriteFrame(io.Discard, FrameOutput, make([]byte, ProcMaxFrame+1)); err == nil {
		t.Error("WriteFrame of an oversized payload succeeded")
	}
	over := []byte{FrameOutput, 0x7f, 0xff, 0xff, 0xff}
	if _, _, err := ReadFrame(bytes.NewReader(over)); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Errorf("ReadFrame of an oversized announcement = %v, want a limit error", err)
	}
	cut := []byte{FrameOutput, 0, 0, 0, 9, 'a'}
	if _, _, err := ReadFrame(bytes.NewReader(cut)); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("ReadFrame of a cut frame = %v, want io.ErrUnexpectedEOF", err)
	}
	if _, err := ParseResize([]byte{1, 2, 3}); err == nil {
		t.Error("ParseResize of 3 bytes succeeded")
	}
	for _, p := range [][]byte{nil, {0}, {65}, {1, 2}} {
		if _, err := ParseSignal(p); err == nil {
			t.Errorf("ParseSignal(%v) succeeded", p)
		}
	}
	got, err := ParseResize(ResizePayload(TTYSize{Cols: 80, Rows: 24}))
	if err != nil || got != (TTYSize{Cols: 80, Rows: 24}) {
		t.Errorf("ParseResize round trip = %v, %v", got, err)
	}
}

func TestRoutesAreDistinct(t *testing.T) {
	seen := map[string]bool{}
	for _, p := range []string{PathProof, PathHealth, PathSystem, PathPoweroff, PathExec, PathFiles, PathFilesList, PathScreenshot, PathAgentPrefix, PathProc} {
		if seen[p] || !strings.HasPrefix(p, "/v1/") {
			t.Errorf("route %q is repeated or not under /v1/", p)
		}
		seen[p] = true
	}
	if diff := cmp.Diff([]string{"/usr/bin/sudo", "-n", "/usr/bin/systemctl", "poweroff"}, PoweroffArgv); diff != "" {
		t.Errorf("PoweroffArgv (-ref 5.2 +got):\n%s", diff)
	}
}
