package mcphost

import (
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/invisible-dots/invisible-dots/guest/engine/images"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

func TestImagesComeApartFromTheText(t *testing.T) {
	dial := func(io.Writer) (sdk.Transport, error) {
		s := sdk.NewServer(&sdk.Implementation{Name: "pictures", Version: "1"}, nil)
		sdk.AddTool(s, &sdk.Tool{Name: "look", Description: "Look."}, func(context.Context, *sdk.CallToolRequest, struct{}) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "here it is"}, &sdk.ImageContent{MIMEType: "image/png", Data: []byte("png-bytes")}}}, nil, nil
		})
		sdk.AddTool(s, &sdk.Tool{Name: "only", Description: "Only an image."}, func(context.Context, *sdk.CallToolRequest, struct{}) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.ImageContent{MIMEType: "image/jpeg", Data: []byte("jpg")}}}, nil, nil
		})
		c1, c2 := net.Pipe()
		if _, err := s.Connect(context.Background(), &sdk.IOTransport{Reader: c2, Writer: c2}, nil); err != nil {
			return nil, err
		}
		return &sdk.IOTransport{Reader: c1, Writer: c1}, nil
	}
	srv := StartServer(ServerOptions{Name: "pictures", Dial: dial})
	defer srv.Close()
	srv.Wait(context.Background())
	for tool, want := range map[string]CallResult{
		"look": {Text: "here it is", OK: true, Images: []images.Raw{{MIME: "image/png", Data: []byte("png-bytes")}}},
		"only": {Text: "", OK: true, Images: []images.Raw{{MIME: "image/jpeg", Data: []byte("jpg")}}},
	} {
		if d := cmp.Diff(want, srv.Call(context.Background(), tool, nil)); d != "" {
			t.Errorf("%s (-want +got):\n%s", tool, d)
		}
	}
}

func TestOnceIsNeverStartedAgain(t *testing.T) {
	mem := &memServer{}
	srv := StartServer(ServerOptions{Name: "once", Dial: mem.dial, Once: true,
		Backoff: Backoff{Initial: 10 * time.Millisecond, Max: 10 * time.Millisecond, Stable: time.Hour}})
	defer srv.Close()
	srv.Wait(context.Background())
	if got := srv.Call(context.Background(), "crash", nil); got.OK || !strings.Contains(got.Text, "went away during the call") {
		t.Errorf("the call that found the crash = %+v", got)
	}
	waitFor(t, "the server to be failed", func() bool { return srv.Status().State == protocol.MCPFailed })
	srv.Retry()
	time.Sleep(100 * time.Millisecond)
	if n := mem.dialCount(); n != 1 || srv.Status().State != protocol.MCPFailed {
		t.Errorf("after a crash and a Retry: %d starts, state %s; want one start, failed", n, srv.Status().State)
	}
}
