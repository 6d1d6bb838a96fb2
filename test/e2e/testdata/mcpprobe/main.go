// Command mcpprobe is the tiny stdio MCP server the golden e2e test ships
// into a Dot's computer: its one tool, whoami, says which user runs it, its
// home, and a digest of the secret its environment holds, so the test sees
// the secret arrived without the value ever being printed.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// SecretEnv is the variable the Dot's config names as the server's secret.
const SecretEnv = "E2E_PROBE_TOKEN"

func main() {
	s := mcp.NewServer(&mcp.Implementation{Name: "probe", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "whoami", Description: "Say who runs this server and a digest of its secret."},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			digest := "unset"
			if v, ok := os.LookupEnv(SecretEnv); ok {
				sum := sha256.Sum256([]byte(v))
				digest = hex.EncodeToString(sum[:])
			}
			text := fmt.Sprintf("uid=%d home=%s secret_sha256=%s", os.Getuid(), os.Getenv("HOME"), digest)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, nil, nil
		})
	if err := s.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, "mcpprobe:", err)
		os.Exit(1)
	}
}
