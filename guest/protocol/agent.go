package protocol

import (
	"fmt"
	"net/http"
	"regexp"
)

// Agent routes (ref 5.3): the engine serves them on its unix socket; the host
// reaches them through dot-agentd as AgentRoutePrefix + route.
const (
	AgentRoutePrefix   = "/v1/agent"
	RouteHealth        = "/health"
	RouteSecrets       = "/secrets"
	RouteConfig        = "/config"
	RouteEvents        = "/events"
	RouteEventsStream  = "/events/stream"
	RouteState         = "/state"
	RouteTools         = "/tools"
	RouteSkills        = "/skills"
	RoutePrepareSleep  = "/prepare-sleep"
	RouteBrowserIdents = "/browser-identities"
)

// The environment the engine reads once at start (ref 8.8), and the names
// of the event stream's resume parameters.
const (
	EnvAgentSocket   = "INVISIBLE_DOTS_AGENT_SOCKET"
	EnvAgentdSocket  = "INVISIBLE_DOTS_AGENTD_SOCKET"
	EnvAgentdBin     = "INVISIBLE_DOTS_AGENTD_BIN"
	EnvWorkspace     = "INVISIBLE_DOTS_WORKSPACE"
	EnvEngineState   = "INVISIBLE_DOTS_ENGINE_STATE"
	EnvNetworkCheck  = "INVISIBLE_DOTS_NETWORK_CHECK"
	EnvMCPCommand    = "INVISIBLE_DOTS_MCP_COMMAND"
	EnvModelUser     = "INVISIBLE_DOTS_MODEL_USER"
	EnvOpenRouterURL = "INVISIBLE_DOTS_OPENROUTER_URL"
	// EnvExitEchoURLs lists the address-echo services a browser launch
	// asks for its exit's address, comma-separated (ref 6).
	EnvExitEchoURLs   = "INVISIBLE_DOTS_EXIT_ECHO_URLS"
	DefaultModelUser  = "dot"
	StreamAfterQuery  = "after"
	StreamLastEventID = "Last-Event-ID"
)

// Health is the answer of GET /health.
type Health struct {
	Status               string        `json:"status"` // HealthOK or HealthStarting
	State                AgentState    `json:"state"`
	OpenRouterConfigured bool          `json:"openrouter_configured"`
	Browser              BrowserCounts `json:"browser"`
	Checks               []HealthCheck `json:"checks"`
}

// Health statuses.
const (
	HealthOK       = "ok"
	HealthStarting = "starting"
)

// BrowserCounts: identities is the number of rows, open the number with a
// live browser.
type BrowserCounts struct {
	Identities int `json:"identities"`
	Open       int `json:"open"`
}

// HealthCheck is one of the engine's own checks (its database, the config,
// the key, dot-agentd's socket). Detail never holds a secret.
type HealthCheck struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail,omitempty"`
}

// SecretsRequest is the body of POST /secrets.
type SecretsRequest struct {
	OpenRouterAPIKey string `json:"openrouter_api_key"`
	// MCPSecrets are every MCP secret in force, by server and name: a map
	// present replaces the engine's whole set, so an empty one ({}) clears
	// it (a revoked secret reaches the guest, ref 4.3); absent (null) keeps
	// the set the engine holds. The host always sends it.
	MCPSecrets map[string]map[string]string `json:"mcp_secrets"`
}

var (
	openRouterKeyRe = regexp.MustCompile(OpenRouterKeyPattern)
	mcpSecretRe     = regexp.MustCompile(MCPSecretPattern)
	mcpServerNameRe = regexp.MustCompile(MCPServerNamePattern)
)

// ValidateOpenRouterKey applies the key rule of ref 4.3 where a key enters
// (the host's command that stores it, the engine's POST /secrets). Its error
// is OpenRouterKeyRule and never contains the key.
func ValidateOpenRouterKey(key string) error {
	if !openRouterKeyRe.MatchString(key) {
		return fmt.Errorf("%s", OpenRouterKeyRule)
	}
	return nil
}

// ValidateMCPSecret applies the MCP secret rule of ref 4.3 where a secret
// enters (the Dots API that stores it, the engine's POST /secrets). Its
// error is MCPSecretRule and never contains the value.
func ValidateMCPSecret(v string) error {
	if !mcpSecretRe.MatchString(v) {
		return fmt.Errorf("%s", MCPSecretRule)
	}
	return nil
}

// Validate applies the key rule and the MCP secret rule of ref 4.3. Its error
// never contains a value.
//
// A body may carry the MCP secrets alone (the key is then kept), an empty
// map included (they are cleared); a body with neither sets nothing and is
// refused.
func (r SecretsRequest) Validate() error {
	if r.OpenRouterAPIKey == "" && r.MCPSecrets == nil {
		return fmt.Errorf("the body holds neither openrouter_api_key nor mcp_secrets")
	}
	if r.OpenRouterAPIKey != "" || r.MCPSecrets == nil {
		if err := ValidateOpenRouterKey(r.OpenRouterAPIKey); err != nil {
			return err
		}
	}
	for server, secrets := range r.MCPSecrets {
		if !mcpServerNameRe.MatchString(server) {
			return fmt.Errorf("mcp_secrets names the server %q, which is not a valid MCP server name", server)
		}
		for name, v := range secrets {
			if name == "" {
				return fmt.Errorf("mcp_secrets of %q has a secret without a name", server)
			}
			if err := ValidateMCPSecret(v); err != nil {
				return fmt.Errorf("secret %q of MCP server %q: %w", name, server, err)
			}
		}
	}
	return nil
}

// Accepted is the answer of POST /events.
type Accepted struct {
	Accepted bool `json:"accepted"`
}

// State is the answer of GET /state. PendingApproval is the id of the oldest
// approval the engine waits on.
type State struct {
	State           AgentState `json:"state"`
	CurrentTaskID   *string    `json:"current_task_id"`
	PendingApproval *string    `json:"pending_approval"`
}

// Tools is the answer of GET /tools.
type Tools struct {
	Tools      []ToolInfo        `json:"tools"`
	MCPServers []MCPServerStatus `json:"mcp_servers"`
}

// ToolInfo is one row of the engine's tool table as GET /tools shows it.
type ToolInfo struct {
	Name        string `json:"name"`
	Permission  string `json:"permission"`
	Offered     bool   `json:"offered"`
	Description string `json:"description"`
}

// MCPServerStatus is a declared MCP server's state in GET /tools.
type MCPServerStatus struct {
	Name  string  `json:"name"`
	State string  `json:"state"` // connecting, connected, failed
	Error *string `json:"error"`
	Tools int     `json:"tools"`
}

// MCP server states.
const (
	MCPConnecting = "connecting"
	MCPConnected  = "connected"
	MCPFailed     = "failed"
)

// Skills is the answer of GET /skills.
type Skills struct {
	Skills []Skill `json:"skills"`
}

// Skill is one skill with the whole of its SKILL.md.
type Skill struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	Source      string `json:"source"` // SkillBuiltin or SkillDot
	Path        string `json:"path"`
	Content     string `json:"content"`
}

// Skill sources.
const (
	SkillBuiltin = "builtin"
	SkillDot     = "dot"
)

// ErrorBody is how an agent route answers an error: { error: code, message }.
type ErrorBody struct {
	Error   string `json:"error"`
	Message string `json:"message"`
}

// Error codes of the agent routes (ref 5.3). not_found and internal are the
// same words as dot-agentd's (agentd.go declares ErrNotFound, ErrInternal).
const (
	ErrInvalidConfig = "invalid_config"
	ErrInvalidSecret = "invalid_secret"
	ErrInvalid       = "invalid"
	ErrLimit         = "limit"
	ErrNotOpen       = "not_open"
	ErrBusy          = "busy"
	ErrCrashed       = "crashed"
	ErrFrameFailed   = "frame_failed"
	// ErrLaunchFailed is an answer of the model's browser_identity_launch, never
	// of a route: no route launches an identity (ref 5.3).
	ErrLaunchFailed = "launch_failed"
	ErrForbidden    = "forbidden"
)

// ErrorStatus is the HTTP status of an error code.
func ErrorStatus(code string) int {
	switch code {
	case ErrInvalidConfig, ErrInvalidSecret, ErrInvalid:
		return http.StatusBadRequest
	case ErrNotFound:
		return http.StatusNotFound
	case ErrMethodNotAllowed:
		return http.StatusMethodNotAllowed
	case ErrLimit, ErrNotOpen:
		return http.StatusConflict
	case ErrBusy:
		return http.StatusServiceUnavailable
	case ErrCrashed, ErrFrameFailed:
		return http.StatusBadGateway
	case ErrForbidden:
		return http.StatusForbidden
	}
	return http.StatusInternalServerError
}

// PrepareSleepGraceSeconds is how long a tool in flight gets to finish and record
// its result on prepare-sleep or SIGTERM (ref 8.7).
const PrepareSleepGraceSeconds = 20

// KeepAliveSeconds is the interval of the event stream's keep-alive comment.
const KeepAliveSeconds = 15
