package wire

import (
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// The routes of a Dot that read its guest (files, the screen, the engine's
// tools, skills and browser identities), its MCP secrets and its spend (ref
// 9.6).

// Error codes of those routes. The guest's own refusals pass through with
// their code and status (protocol.ErrOutsideHome, protocol.ErrNotFound,
// protocol.ErrIsDirectory, protocol.ErrNotDirectory, the engine's codes).
const (
	// CodeInvalidPath: a file path outside /home/dot or with a ".."
	// segment, refused before the guest is asked (400).
	CodeInvalidPath = "invalid_path"
	// CodeFileTooLarge: the file is larger than MaxFileBytes (413).
	CodeFileTooLarge = "file_too_large"
	// CodeComputerStopped: the route needs the Dot's computer running, and
	// it is not (409).
	CodeComputerStopped = "computer_stopped"
	// CodeGuestUnavailable: the computer runs and its guest could not be
	// reached: still booting, not answering, or a listener on its port that
	// could not prove it is the guest (503).
	CodeGuestUnavailable = "guest_unavailable"
	// CodeHostUnreachable: the Dot's computer runs on a host whose agent is
	// another process than the server's; guest routes through remote host
	// agents are not served yet (502).
	CodeHostUnreachable = "host_unreachable"
	// CodeGuestError: the guest refused with a code that is not a word of
	// the protocol; its status passes through.
	CodeGuestError = "guest_error"
)

// Limits of the guest routes.
const (
	// MaxFileBytes is the largest file GET FilesPath answers (ref 9.6): a
	// read is one buffered answer, and a larger file is a 413
	// CodeFileTooLarge, its reading stopped as soon as it passes the limit.
	MaxFileBytes = 16 << 20
	// MaxGuestAnswer bounds any other answer read from a guest (a listing,
	// a screenshot, the engine's tools, skills and browser identities, a
	// frame).
	MaxGuestAnswer = 32 << 20
	// MaxMCPSecretBody is the largest body of PUT MCPSecretPath.
	MaxMCPSecretBody = 64 << 10
	// MaxBrowserIdentityBody is the largest body of POST
	// BrowserIdentitiesPath: a name and a proxy URL.
	MaxBrowserIdentityBody = 64 << 10
)

// DotHome is the one directory the file routes read: the Dot's home.
const DotHome = protocol.DefaultDotHome

func dotPath(namespace, dot string) string {
	return Prefix + "namespaces/" + url.PathEscape(namespace) + "/dots/" + url.PathEscape(dot)
}

// FilesListPath lists a directory of the Dot's home (GET ?path=: FileList).
func FilesListPath(namespace, dot string) string { return dotPath(namespace, dot) + "/files/list" }

// FilesPath reads a file of the Dot's home (GET ?path=): its bytes, typed
// by FileTypeOf.
func FilesPath(namespace, dot string) string { return dotPath(namespace, dot) + "/files" }

// ScreenshotPath is the Dot's desktop as a PNG (GET).
func ScreenshotPath(namespace, dot string) string { return dotPath(namespace, dot) + "/screenshot" }

// ToolsPath is the engine's tool table (GET: protocol.Tools).
func ToolsPath(namespace, dot string) string { return dotPath(namespace, dot) + "/tools" }

// SkillsPath is the Dot's skills (GET: protocol.Skills).
func SkillsPath(namespace, dot string) string { return dotPath(namespace, dot) + "/skills" }

// BrowserIdentitiesPath lists the Dot's browser identities (GET:
// protocol.BrowserIdentities) or creates one (POST
// protocol.BrowserIdentityCreate: 201 protocol.BrowserIdentity); the
// engine's routes of ref 5.3 passed through.
func BrowserIdentitiesPath(namespace, dot string) string {
	return dotPath(namespace, dot) + "/browser-identities"
}

// BrowserIdentityPath reads (GET: protocol.BrowserIdentity) or deletes
// (DELETE: 204) one browser identity of the Dot.
func BrowserIdentityPath(namespace, dot, id string) string {
	return BrowserIdentitiesPath(namespace, dot) + "/" + url.PathEscape(id)
}

// BrowserFramePath is one frame of an open identity's window (GET:
// image/jpeg).
func BrowserFramePath(namespace, dot, id string) string {
	return BrowserIdentityPath(namespace, dot, id) + protocol.BrowserIdentityFrame
}

// BrowserClosePath closes an identity's browser, its profile kept (POST:
// 204).
func BrowserClosePath(namespace, dot, id string) string {
	return BrowserIdentityPath(namespace, dot, id) + protocol.BrowserIdentityClose
}

// MCPSecretsPath lists the MCP secrets the Dot's config names (GET:
// MCPSecrets).
func MCPSecretsPath(namespace, dot string) string { return dotPath(namespace, dot) + "/mcp-secrets" }

// MCPSecretPath sets (PUT SetMCPSecret: MCPSecret) or clears (DELETE: 204)
// one MCP secret of the Dot.
func MCPSecretPath(namespace, dot, server, name string) string {
	return MCPSecretsPath(namespace, dot) + "/" + url.PathEscape(server) + "/" + url.PathEscape(name)
}

// UsagePath is the Dot's model spend (GET ?since=: Usage).
func UsagePath(namespace, dot string) string { return dotPath(namespace, dot) + "/usage" }

// HomePath normalizes a file path of the file routes to an absolute path
// under DotHome, as the guest is always given one (ref 9.6): absolute,
// relative to the home, or "~"-relative; "" is the home. ok is false for a
// path outside the home or with a ".." segment. The check is lexical and
// only the early answer: dot-agentd resolves the links and has the last
// word (protocol.ErrOutsideHome).
func HomePath(p string) (abs string, ok bool) {
	if strings.ContainsRune(p, 0) {
		return "", false
	}
	switch {
	case p == "" || p == "~":
		return DotHome, true
	case strings.HasPrefix(p, "~/"):
		p = p[2:]
	case strings.HasPrefix(p, "/"):
		if p != DotHome && !strings.HasPrefix(p, DotHome+"/") {
			return "", false
		}
		p = strings.TrimPrefix(p, DotHome)
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == ".." {
			return "", false
		}
	}
	return path.Join(DotHome, p), true
}

// FileList answers GET FilesListPath: the directory (absolute) and its
// entries, as dot-agentd lists them.
type FileList struct {
	Path    string               `json:"path"`
	Entries []protocol.ListEntry `json:"entries"`
}

// FileKind is how a file of the Dot is served and shown.
type FileKind string

const (
	// FileText is served as text/plain inline: source and markup alike
	// (svg and html too), so a file the Dot wrote is never run.
	FileText FileKind = "text"
	// FileImage is served inline as its own image type.
	FileImage FileKind = "image"
	// FileDownload is everything else: application/octet-stream, as an
	// attachment.
	FileDownload FileKind = "download"
)

// FileType is how a file is served: its kind and content type.
type FileType struct {
	Kind        FileKind
	ContentType string
}

const textPlain = "text/plain; charset=utf-8"

// fileTypes is the one table of what is text and what is an image, by
// extension (lower case); anything not in it is a download. The bytes are
// the Dot's own, perhaps written after reading hostile text, and are
// served from the API's origin, so no type a browser runs is ever given.
var fileTypes = func() map[string]FileType {
	m := map[string]FileType{
		".png":  {FileImage, "image/png"},
		".jpg":  {FileImage, "image/jpeg"},
		".jpeg": {FileImage, "image/jpeg"},
		".gif":  {FileImage, "image/gif"},
		".webp": {FileImage, "image/webp"},
	}
	for _, ext := range strings.Fields(`.txt .text .md .markdown .rst .adoc .log .csv .tsv
		.json .jsonl .ndjson .yaml .yml .toml .ini .cfg .conf .env .properties .xml .html .htm .xhtml .svg .css
		.js .mjs .cjs .ts .tsx .jsx .vue .go .mod .sum .py .pyi .rb .rs .java .kt .kts .scala .c .h .cc .cpp .hpp
		.cs .swift .php .pl .lua .r .jl .sh .bash .zsh .fish .ps1 .sql .graphql .proto .tf .hcl .dockerfile
		.gitignore .diff .patch .tex .bib .srt .vtt .ipynb`) {
		m[ext] = FileType{FileText, textPlain}
	}
	return m
}()

// fileNames are files known by their whole name.
var fileNames = map[string]bool{
	"Makefile": true, "Dockerfile": true, "README": true, "LICENSE": true, "CHANGELOG": true,
	"SKILL.md": true, "MEMORY.md": true, "AGENTS.md": true,
}

// FileTypeOf is how the file named name (a base name or a path) is served.
func FileTypeOf(name string) FileType {
	base := path.Base(name)
	if fileNames[base] {
		return FileType{FileText, textPlain}
	}
	if t, ok := fileTypes[strings.ToLower(path.Ext(base))]; ok {
		return t
	}
	return FileType{FileDownload, "application/octet-stream"}
}

// FileCSP is the Content-Security-Policy of every file and screenshot
// answer (ref 9.6): nothing loads, and the document is sandboxed.
const FileCSP = "default-src 'none'; sandbox"

// MCPSecret is one secret an MCP server of the Dot's config names, and
// whether a value is stored for it; never the value.
type MCPSecret struct {
	Server string `json:"server"`
	Name   string `json:"name"`
	Set    bool   `json:"set"`
}

// MCPSecrets answers GET MCPSecretsPath: every secret the config's MCP
// servers name, in the config's order.
type MCPSecrets struct {
	Dot     DotRef      `json:"dot"`
	Secrets []MCPSecret `json:"secrets"`
}

// SetMCPSecret is the body of PUT MCPSecretPath: the value, which must keep
// protocol.MCPSecretRule.
type SetMCPSecret struct {
	Value string `json:"value"`
}

// UsageQuery is the query of GET UsagePath: the spend since Since (RFC
// 3339), from the first event when nil.
type UsageQuery struct {
	Since *time.Time
}

// Values encodes q as a URL query.
func (q UsageQuery) Values() url.Values {
	v := url.Values{}
	if q.Since != nil {
		v.Set("since", q.Since.Format(time.RFC3339Nano))
	}
	return v
}

// Usage answers GET UsagePath: the model spend the Dot's guest reported,
// in USD, since Since (nil: the first event). It sums spent_usd over the
// events that end a unit of spend (ref 9.6): a task's task.completed and
// task.failed, and the chat's message.assistant, by the time the host
// stored them.
type Usage struct {
	Dot      DotRef     `json:"dot"`
	Since    *time.Time `json:"since"`
	SpentUSD float64    `json:"spent_usd"`
}

// SpendEventTypes are the guest's events that end a unit of spend, whose
// spent_usd the usage sums. task.progress is left out: it is the running
// total of a task that ends with one of these. memory.updated is counted
// (ref 9.6 names only the three others): a memory pass is model spend like
// a turn's, on a ledger of its own, reported once by the event that ends it,
// so a total without it would say the Dot spent less than it did.
var SpendEventTypes = []string{protocol.EventTaskCompleted, protocol.EventTaskFailed, protocol.EventMessageAssistant, protocol.EventMemoryUpdated}
