package protocol

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
)

// This file is the wire contract of dot-agentd (ref 5.2): where it listens,
// every route path, the bodies, the error codes, and the dots-proc/1 framing
// of the local socket's POST /v1/proc. The host's guest client, dot-agentd and
// the engine's tools all use these names; none of them spells a path itself.

// AgentdPort is the guest TCP port dot-agentd listens on; QEMU forwards
// 127.0.0.1:<guest port> on the host to it (ref 3.5, 5.1).
const AgentdPort = 1024

// Local sockets and their directories inside the guest (ref 4.2).
const (
	// AgentdSocketDir is dotagentd:dotengine 2750: only the engine's group may
	// enter, so dot cannot reach the socket.
	AgentdSocketDir = "/run/invisible-dots"
	// AgentdSocketPath is dot-agentd's local API for the engine (no token).
	AgentdSocketPath = AgentdSocketDir + "/agentd.sock"
	// AgentSocketDir is dotengine:dotagentd 2750.
	AgentSocketDir = "/run/invisible-dots-agent"
	// AgentSocketPath is the engine's API, reached by dot-agentd's reverse
	// proxy at /v1/agent/*.
	AgentSocketPath = AgentSocketDir + "/agent.sock"
)

// Guest-side files and environment (ref 4.1, 4.2).
const (
	// GuestConfigPath is the Dot's guest configuration (GuestConfig as JSON),
	// 0600, owned by dotagentd: dot-agentd's alone.
	GuestConfigPath = "/etc/invisible-dots/config.json"
	// RuntimeMountPoint is where the runtime ISO is mounted, read-only.
	RuntimeMountPoint = "/opt/invisible-dots"
	// DefaultDotHome is the Dot's home; DotHomeEnv overrides it.
	DefaultDotHome = "/home/dot"
	DotHomeEnv     = "DOT_HOME"
	// RunAsEnv names the user the work runs as (dot-agentd --run-as);
	// DefaultRunAs is dot. An empty value is the development mode: work runs
	// as the daemon's own user.
	RunAsEnv     = "INVISIBLE_DOTS_RUN_AS"
	DefaultRunAs = "dot"
	// DisplayEnv and DefaultDisplay: the desktop every screenshot and every
	// program of the model sees.
	DisplayEnv     = "DISPLAY"
	DefaultDisplay = ":0"
)

// The guest's three users (ref 4.1). None is shared.
const (
	UserDot       = "dot"
	UserDotAgentd = "dotagentd"
	UserDotEngine = "dotengine"
)

// Routes of dot-agentd. Every route but PathProof needs the token on TCP;
// the local socket needs none (its directory says who may connect).
const (
	PathProof      = "/v1/proof"           // GET ?nonce=; TCP only; no token
	PathHealth     = "/v1/health"          // GET -> HealthResponse
	PathSystem     = "/v1/system"          // GET -> SystemResponse
	PathPoweroff   = "/v1/system/poweroff" // POST -> 202 PoweroffResponse; TCP only
	PathExec       = "/v1/exec"            // POST ExecRequest -> ExecResponse
	PathFiles      = "/v1/files"           // GET ?path= -> bytes; PUT ?path= body -> 204
	PathFilesList  = "/v1/files/list"      // GET ?path= -> ListResponse
	PathScreenshot = "/v1/screenshot"      // GET -> image/png of DefaultDisplay
	// PathAgentPrefix is reverse-proxied to AgentSocketPath with the prefix
	// replaced by "/" (GET /v1/agent/health -> GET /health). TCP only.
	PathAgentPrefix = "/v1/agent/"
	// PathProc is the local socket's one route of its own: a process over an
	// upgraded connection speaking ProcProtocol.
	PathProc = "/v1/proc"
)

// Query parameters.
const (
	QueryNonce = "nonce"
	QueryPath  = "path"
)

// The nonce of GET /v1/proof is 32 to 128 lowercase hex characters.
const (
	ProofNonceMinHex = 32
	ProofNonceMaxHex = 128
)

// Limits of POST /v1/exec (ref 5.2): each output stream is cut at ExecOutputCap
// bytes; a command without timeout_ms gets ExecDefaultTimeoutMs, and none may
// ask for more than ExecMaxTimeoutMs.
const (
	ExecOutputCap        = 1 << 20
	ExecDefaultTimeoutMs = 60_000
	ExecMaxTimeoutMs     = 600_000
	// ExecShell runs every command of POST /v1/exec as ExecShell -lc COMMAND.
	ExecShell = "/bin/bash"
)

// PoweroffArgv is what dot-agentd starts, detached, for POST
// /v1/system/poweroff: the one command the seed's sudoers rule lets dotagentd
// run as root. Named by absolute path so nothing dot writes is found first.
var PoweroffArgv = []string{"/usr/bin/sudo", "-n", "/usr/bin/systemctl", "poweroff"}

// Error codes, the "error" of ErrorResponse. The HTTP status goes with each.
const (
	ErrUnauthorized     = "unauthorized"       // 401: no or wrong token
	ErrBadNonce         = "bad_nonce"          // 400: nonce missing or not 32..128 lowercase hex
	ErrInvalidRequest   = "invalid_request"    // 400: body or query does not parse or breaks a rule
	ErrOutsideHome      = "outside_home"       // 403: TCP file route resolving outside the Dot's home
	ErrPermissionDenied = "permission_denied"  // 403: dot may not open that path
	ErrNotFound         = "not_found"          // 404: no such file or directory; unknown route
	ErrMethodNotAllowed = "method_not_allowed" // 405: a known path asked with another method (Allow lists them)
	ErrIsDirectory      = "is_a_directory"     // 400: GET/PUT /v1/files on a directory
	ErrNotDirectory     = "not_a_directory"    // 400: GET /v1/files/list on a file
	ErrTooLarge         = "too_large"          // 413: a body over the route's limit
	ErrNoDisplay        = "no_display"         // 503: no X display to screenshot
	ErrScreenshotFailed = "screenshot_failed"  // 500: the capture program failed
	ErrPoweroffFailed   = "poweroff_failed"    // 500: the poweroff command could not be started
	ErrAgentUnavailable = "agent_unavailable"  // 502: the engine's socket does not answer
	ErrUpgradeRequired  = "upgrade_required"   // 426: POST /v1/proc without Upgrade: dots-proc/1
	ErrExecFailed       = "exec_failed"        // 500: the program could not be started
	ErrInternal         = "internal"           // 500: anything else
)

// ErrorResponse is the body of every answer that is not a success.
type ErrorResponse struct {
	Error   string `json:"error"`
	Message string `json:"message,omitempty"`
}

// ProofResponse answers GET /v1/proof: ComputeProof(token, nonce).
type ProofResponse struct {
	Proof string `json:"proof"`
}

// AgentdOK is HealthResponse.Agentd when dot-agentd serves.
const AgentdOK = "ok"

// HealthResponse answers GET /v1/health. Agent is the engine's own GET
// /health answer, passed through unchanged (ref 5.3: status, state,
// openrouter_configured, browser, checks), or JSON null when the engine's
// socket does not answer: a guest without an engine is up but not READY.
// RuntimeVersion is the version of the runtime ISO the guest mounted (its
// manifest.json), so the host knows which of our code a guest runs; empty
// when there is none.
type HealthResponse struct {
	Agentd         string          `json:"agentd"`
	Agent          json.RawMessage `json:"agent"`
	UptimeS        int64           `json:"uptime_s"`
	RuntimeVersion string          `json:"runtime_version,omitempty"`
}

// SystemResponse answers GET /v1/system: facts of the guest, not decisions.
type SystemResponse struct {
	Hostname          string `json:"hostname"`
	UptimeS           int64  `json:"uptime_s"`
	CPUs              int    `json:"cpus"`
	MemTotalBytes     uint64 `json:"mem_total_bytes"`
	MemAvailableBytes uint64 `json:"mem_available_bytes"`
	DiskTotalBytes    uint64 `json:"disk_total_bytes"`
	DiskFreeBytes     uint64 `json:"disk_free_bytes"`
}

// PoweroffStatus is PoweroffResponse.Status of a 202.
const PoweroffStatus = "powering_off"

// PoweroffResponse answers POST /v1/system/poweroff with 202.
type PoweroffResponse struct {
	Status string `json:"status"`
}

// ExecRequest is the body of POST /v1/exec. Cwd is resolved against the
// Dot's home when relative; TimeoutMs 0 means ExecDefaultTimeoutMs.
type ExecRequest struct {
	Command   string `json:"command"`
	Cwd       string `json:"cwd,omitempty"`
	TimeoutMs int64  `json:"timeout_ms,omitempty"`
}

// ExecResponse answers POST /v1/exec. ExitCode is -1 when a signal ended the
// command (a timeout included). Stdout and Stderr are cut at ExecOutputCap
// bytes each, and the *Truncated flags say so.
type ExecResponse struct {
	ExitCode        int    `json:"exit_code"`
	Stdout          string `json:"stdout"`
	Stderr          string `json:"stderr"`
	TimedOut        bool   `json:"timed_out"`
	StdoutTruncated bool   `json:"stdout_truncated,omitempty"`
	StderrTruncated bool   `json:"stderr_truncated,omitempty"`
}

// FilesMaxPutBytes bounds the body of PUT /v1/files.
const FilesMaxPutBytes = 256 << 20

// Entry types of GET /v1/files/list.
const (
	EntryFile  = "file"
	EntryDir   = "dir"
	EntryOther = "other"
)

// ListEntry is one directory entry. A symbolic link is listed as what it
// points to ("other" when that cannot be read). Mtime is RFC 3339.
type ListEntry struct {
	Name  string `json:"name"`
	Type  string `json:"type"`
	Size  int64  `json:"size"`
	Mtime string `json:"mtime"`
}

// ListResponse answers GET /v1/files/list, entries sorted by name.
type ListResponse struct {
	Entries []ListEntry `json:"entries"`
}

// ProcProtocol is the Upgrade token of POST /v1/proc.
const ProcProtocol = "dots-proc/1"

// ProcRequest is the body of POST /v1/proc. Argv[0] is looked up in the PATH
// of the environment dot-agentd builds for dot (not its own) when it holds no
// slash. Env entries are NAME=VALUE.
type ProcRequest struct {
	Argv []string `json:"argv"`
	Cwd  string   `json:"cwd,omitempty"`
	Env  []string `json:"env,omitempty"`
	TTY  *TTYSize `json:"tty,omitempty"`
}

// TTYSize is a terminal's size in character cells.
type TTYSize struct {
	Cols uint16 `json:"cols"`
	Rows uint16 `json:"rows"`
}

// Frames of dots-proc/1: one type byte, a big-endian uint32 payload length,
// the payload. ProcMaxFrame bounds the payload a reader accepts.
const (
	FrameInput     byte = 'i' // caller -> agentd: bytes for the program's input
	FrameEOF       byte = 'e' // caller -> agentd: end of input (^D on a terminal)
	FrameResize    byte = 'r' // caller -> agentd: uint16 cols, uint16 rows (big-endian)
	FrameSignal    byte = 's' // caller -> agentd: one byte, a signal number (1..64) for the process group
	FrameOutput    byte = 'o' // agentd -> caller: standard output (everything on a terminal)
	FrameErrOutput byte = 'E' // agentd -> caller: standard error (never on a terminal)
	FrameExit      byte = 'x' // agentd -> caller, last: ProcExit as JSON
	ProcFrameHead       = 5
	ProcMaxFrame        = 1 << 20
)

// ProcExit is the payload of the last frame. Signal is set when a signal
// ended the program; ExitCode is then 128 + the signal's number, the code the
// relay exits with.
type ProcExit struct {
	ExitCode int `json:"exit_code"`
	Signal   int `json:"signal,omitempty"`
}

// WriteFrame writes one dots-proc/1 frame.
func WriteFrame(w io.Writer, typ byte, payload []byte) error {
	if len(payload) > ProcMaxFrame {
		return fmt.Errorf("frame %q of %d bytes is over the %d-byte limit", typ, len(payload), ProcMaxFrame)
	}
	buf := make([]byte, ProcFrameHead+len(payload))
	buf[0] = typ
	binary.BigEndian.PutUint32(buf[1:ProcFrameHead], uint32(len(payload)))
	copy(buf[ProcFrameHead:], payload)
	_, err := w.Write(buf)
	return err
}

// ReadFrame reads one dots-proc/1 frame. It returns io.EOF only when the
// stream ends cleanly between frames.
func ReadFrame(r io.Reader) (typ byte, payload []byte, err error) {
	var head [ProcFrameHead]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(head[1:])
	if n > ProcMaxFrame {
		return 0, nil, fmt.Errorf("frame %q announces %d bytes, over the %d-byte limit", head[0], n, ProcMaxFrame)
	}
	payload = make([]byte, n)
	if _, err := io.ReadFull(r, payload); err != nil {
		return 0, nil, fmt.Errorf("read frame %q payload: %w", head[0], io.ErrUnexpectedEOF)
	}
	return head[0], payload, nil
}

// ResizePayload encodes the payload of a FrameResize.
func ResizePayload(size TTYSize) []byte {
	var b [4]byte
	binary.BigEndian.PutUint16(b[0:2], size.Cols)
	binary.BigEndian.PutUint16(b[2:4], size.Rows)
	return b[:]
}

// ParseResize decodes the payload of a FrameResize.
func ParseResize(p []byte) (TTYSize, error) {
	if len(p) != 4 {
		return TTYSize{}, fmt.Errorf("resize frame holds %d bytes, want 4 (uint16 cols, uint16 rows)", len(p))
	}
	return TTYSize{Cols: binary.BigEndian.Uint16(p[0:2]), Rows: binary.BigEndian.Uint16(p[2:4])}, nil
}

// SignalPayload encodes the payload of a FrameSignal: one byte.
func SignalPayload(sig int) []byte { return []byte{byte(sig)} }

// ParseSignal decodes the payload of a FrameSignal.
func ParseSignal(p []byte) (int, error) {
	if len(p) != 1 || p[0] == 0 || p[0] > 64 {
		return 0, fmt.Errorf("signal frame must hold one byte, a signal number from 1 to 64")
	}
	return int(p[0]), nil
}
