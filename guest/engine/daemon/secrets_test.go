package daemon

import (
	"encoding/json"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/utils/ptr"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// TestNoSecretReachesAFile writes every secret the engine holds through
// every path a person or the model can take it (a message, an answer, a
// call's arguments that waited for approval, a browser identity's proxy, then
// the identity deleted), lets the engine write its files (the conversation
// files and, after the memory pass, MEMORY.md), and greps every file under
// the Dot's home and every file the engine keeps beside its database.
func TestNoSecretReachesAFile(t *testing.T) {
	const (
		key        = "sk-or-test-key-123" // what harness.configure pushes
		mcpSecret  = "mcp-secret-value-42"
		typed      = fakeTypedPassword
		proxyPass  = "s3cr3t-proxy"
		proxyURL   = "http://bob:" + proxyPass + "@proxy.example:3128"
		noteMarker = "please go ahead"
	)
	fp := &fakePlaywright{}
	tools := &fakeTools{}
	h, cfg := newHarness(t, t.TempDir(), newFakeOpenRouter(t), tools)
	cfg.AgentdBin, cfg.MCPCommand = "/bin/true", "/usr/local/bin/playwright-mcp"
	cfg.MemoryQuiet = testQuiet
	h.launch(cfg, Deps{Model: h.or.client(), Tools: tools, Files: h.files, BrowserDial: fp.dial})
	s := openStream(t, h.c, 0, false)
	rc := testConfig(map[string]protocol.Decision{"files.write": protocol.Ask})
	rc.Models = map[string]string{"summary": "fake/summary"}
	h.configure(rc)
	if code, body := call(t, h.c, "POST", "/secrets", protocol.SecretsRequest{MCPSecrets: map[string]map[string]string{"search": {"TOKEN": mcpSecret}}}); code != http.StatusNoContent {
		t.Fatalf("POST /secrets = %d %s", code, body)
	}
	proxy := proxyURL
	code, body := call(t, h.c, "POST", "/browser-identities", protocol.BrowserIdentityCreate{Name: "far", Proxy: &proxy})
	var far protocol.BrowserIdentity
	if json.Unmarshal(body, &far); code != http.StatusCreated {
		t.Fatalf("POST /browser-identities = %d %s", code, body)
	}

	// The person says every secret; the stand-in model says it back.
	h.send("m1", protocol.InboundUserMessage, protocol.UserMessage{Text: "key " + key + " token " + mcpSecret + " proxy " + proxyURL + " password " + proxyPass})
	s.waitFor(t, "the first answer", func(evs []protocol.OutboundEvent) bool { return countType(evs, protocol.EventMessageAssistant) == 1 })
	// A call whose arguments carry a password waits for approval, is
	// approved with a note, and runs.
	h.send("m2", protocol.InboundUserMessage, protocol.UserMessage{Text: `run fake_write {"path":"login","password":"$TYPED"}`})
	evs := s.waitFor(t, "approval.requested", hasType(protocol.EventApprovalRequested))
	ar := decode[protocol.ApprovalRequested](t, ofType(evs, protocol.EventApprovalRequested)[0])
	h.send("a1", protocol.InboundApprovalReceived, protocol.ApprovalReceived{ApprovalID: ar.ApprovalID, Decision: protocol.ApprovalApprove, Note: ptr.To(noteMarker)})
	s.waitFor(t, "the second answer", func(evs []protocol.OutboundEvent) bool { return countType(evs, protocol.EventMessageAssistant) == 2 })
	if runs := tools.Runs(); len(runs) != 1 || !strings.Contains(runs[0], typed) {
		t.Fatalf("the approved call ran %q, want once with its arguments as the model gave them", runs)
	}
	// The identity goes; the day's chat file is written again whole after
	// the next turn, and its proxy must stay masked.
	if code, _ := call(t, h.c, "DELETE", "/browser-identities/"+far.ID, nil); code != http.StatusNoContent {
		t.Fatalf("DELETE the identity = %d", code)
	}
	h.send("m3", protocol.InboundUserMessage, protocol.UserMessage{Text: "thanks"})
	s.waitFor(t, "memory.updated", hasType(protocol.EventMemoryUpdated))
	chat := waitForFile(t, h, "/home/dot/conversations/chat/", "echo: thanks")
	if !strings.Contains(chat, "[Approval] The person approved your call of fake_write (files.write). Their note: "+noteMarker) {
		t.Errorf("the chat file does not show the decision's public line:\n%s", chat)
	}
	if strings.Contains(chat, "exactly these arguments") {
		t.Errorf("the chat file holds the approval's continuation with its arguments:\n%s", chat)
	}
	if h.files.Get(memoryPath) == "" {
		t.Fatalf("the memory pass wrote no MEMORY.md")
	}

	secrets := []string{key, mcpSecret, typed, proxyURL, proxyPass}
	files := map[string]string{}
	h.files.mu.Lock()
	for p, v := range h.files.files {
		files["home:"+p] = v
	}
	h.files.mu.Unlock()
	// Beside the database (its own file holds the approval's arguments by
	// design: ref 8.6 "the arguments live in the engine's database"), the
	// engine keeps nothing that may hold a secret.
	filepath.WalkDir(h.dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Type()&fs.ModeSocket != 0 || strings.HasPrefix(d.Name(), "engine.sqlite") {
			return nil
		}
		b, _ := os.ReadFile(p)
		files["state:"+p] = string(b)
		return nil
	})
	if len(files) < 2 {
		t.Fatalf("only %d files to search", len(files))
	}
	for name, content := range files {
		for _, secret := range secrets {
			if strings.Contains(content, secret) {
				t.Errorf("%s holds the secret %q:\n%s", name, secret, content)
			}
		}
	}
}
