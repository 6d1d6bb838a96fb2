package protocol

import (
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode"
)

// RuntimeConfig is DotRuntimeConfig (ref 7): what PUT /config carries to the
// guest. It is the Dot's configuration minus `computer`, with `permissions`
// resolved by the host (one decision per permission the registry knows plus
// one per declared MCP server); the guest applies the map as it is and denies
// a permission missing from it.
type RuntimeConfig struct {
	Name         string                     `json:"name"`
	Instructions string                     `json:"instructions,omitempty"`
	Model        ModelRef                   `json:"model"`
	Models       map[string]string          `json:"models,omitempty"`
	Permissions  map[string]Decision        `json:"permissions"`
	Limits       Limits                     `json:"limits"`
	MCPServers   map[string]MCPServerConfig `json:"mcp_servers,omitempty"`
	// Delegation is whom the Dot may ask to do a task (delegate_task);
	// absent when it may ask nobody, so a guest that predates it never
	// sees the key.
	Delegation *DelegationConfig `json:"delegation,omitempty"`
	// UntrustedInput lists the permissions asked while a turn is tainted by
	// untrusted input; absent is DefaultUntrustedAsk.
	UntrustedInput *UntrustedInputConfig `json:"untrusted_input,omitempty"`
	// AllowUntil is when a permission's allow ends (RFC 3339), by
	// permission: at and after it, the guest asks (an "always" given for a
	// while). Absent for allows given for ever.
	AllowUntil map[string]string `json:"allow_until,omitempty"`
}

// UntrustedInputConfig is the Dot's untrustedInput: the permissions asked
// while a turn is tainted. "mcp.*" stands for every declared server's.
type UntrustedInputConfig struct {
	Ask []string `json:"ask"`
}

// UntrustedAsks reports whether the config asks for permission while a
// turn is tainted by untrusted input.
func (c RuntimeConfig) UntrustedAsks(permission string) bool {
	if c.UntrustedInput == nil {
		return UntrustedAsksByDefault(permission)
	}
	for _, p := range c.UntrustedInput.Ask {
		if p == permission {
			return true
		}
		if p == MCPPermissionPrefix+"*" {
			if _, ok := MCPServerOfPermission(permission); ok {
				return true
			}
		}
	}
	return false
}

// AllowEnds returns when the config's allow of a permission ends; ok is
// false for an allow without an end (or one the guest cannot read, which
// Validate refuses).
func (c RuntimeConfig) AllowEnds(permission string) (time.Time, bool) {
	v, ok := c.AllowUntil[permission]
	if !ok {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339, v)
	return t, err == nil
}

// DelegationConfig is the part of a Dot's delegation settings the guest
// needs: the Dots of its namespace it may ask. Whether a Dot accepts is the
// host's to check, at the moment of each request.
type DelegationConfig struct {
	CanAsk []string `json:"can_ask"`
}

// MaxDelegationNames is the most Dots can_ask names.
const MaxDelegationNames = 50

// CanAsk reports the Dots the config lets the Dot ask, nil for none.
func (c RuntimeConfig) CanAsk() []string {
	if c.Delegation == nil {
		return nil
	}
	return c.Delegation.CanAsk
}

// ModelRef names the Dot's model; provider is always "openrouter".
type ModelRef struct {
	Provider string `json:"provider"`
	ID       string `json:"id"`
	// Reasoning is the reasoning effort asked of the model (ReasoningEfforts);
	// empty leaves the model's own default.
	Reasoning string `json:"reasoning,omitempty"`
}

// ReasoningEfforts are the accepted model.reasoning values, sent to
// OpenRouter as reasoning.effort.
var ReasoningEfforts = []string{"none", "low", "medium", "high"}

// ProviderOpenRouter is the one accepted model provider.
const ProviderOpenRouter = "openrouter"

// Limits are the per-task limits. A zero value stands for an absent key and
// takes the default of Bounds (ApplyDefaults).
type Limits struct {
	MaxStepsPerTask   int     `json:"max_steps_per_task"`
	MaxCostPerTaskUSD float64 `json:"max_cost_per_task_usd"`
}

// MCPServerConfig is one declared MCP server: a command with args and env, or
// a url with headers. Secrets name env variables (command) or headers (url)
// whose values travel apart, in POST /secrets.
type MCPServerConfig struct {
	Command         string            `json:"command,omitempty"`
	Args            []string          `json:"args,omitempty"`
	Env             map[string]string `json:"env,omitempty"`
	URL             string            `json:"url,omitempty"`
	Headers         map[string]string `json:"headers,omitempty"`
	Secrets         []string          `json:"secrets,omitempty"`
	TimeoutS        int               `json:"timeout_s,omitempty"`
	StartupTimeoutS int               `json:"startup_timeout_s,omitempty"`
	// Trusted says the server's results are the owner's own data: they do
	// not taint a turn (the guardrail of untrusted input).
	Trusted bool `json:"trusted,omitempty"`
}

// DecodeRuntimeConfig reads a PUT /config body strictly (DecodeBytes): an
// unknown key (a goal, browser settings, context tokens of old configs) is
// refused, as the host's schema refuses it, and so is anything after the
// object. A limit the body leaves out takes its default; one it gives, zero
// included, is checked against its bounds. The result is valid.
func DecodeRuntimeConfig(body []byte) (RuntimeConfig, error) {
	var c RuntimeConfig
	// Decoding into a struct keeps the fields the body does not name.
	c.ApplyDefaults()
	if err := DecodeBytes(body, &c); err != nil {
		return RuntimeConfig{}, fmt.Errorf("config is not a valid DotRuntimeConfig: %w", err)
	}
	if err := c.Validate(); err != nil {
		return RuntimeConfig{}, err
	}
	return c, nil
}

// ApplyDefaults fills the limits a config left out with Bounds' defaults.
func (c *RuntimeConfig) ApplyDefaults() {
	if c.Limits.MaxStepsPerTask == 0 {
		c.Limits.MaxStepsPerTask = Bounds.MaxStepsPerTask.Default
	}
	if c.Limits.MaxCostPerTaskUSD == 0 {
		c.Limits.MaxCostPerTaskUSD = Bounds.MaxCostPerTaskUSD.Default
	}
}

var (
	dotNameRe = regexp.MustCompile(NamePattern)
	envNameRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	// headerNameRe is an HTTP token (RFC 9110 5.6.2).
	headerNameRe = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
)

// hasControl reports whether s holds a control character (C0, DEL or C1).
func hasControl(s string) bool { return hasControlBut(s, -1) }

func hasControlBut(s string, allowed rune) bool {
	for _, r := range s {
		if r != allowed && unicode.IsControl(r) {
			return true
		}
	}
	return false
}

// Validate applies the rules of ref 7 to a runtime config. The error names
// the field and the rule, never a secret (a config holds none).
func (c RuntimeConfig) Validate() error {
	if !dotNameRe.MatchString(c.Name) {
		return fmt.Errorf("name %q must be 1 to 40 of [a-z0-9-]", c.Name)
	}
	if c.Model.Reasoning != "" && !slices.Contains(ReasoningEfforts, c.Model.Reasoning) {
		return fmt.Errorf("model.reasoning %q is not accepted: use one of %s, or leave it out for the model's default", c.Model.Reasoning, strings.Join(ReasoningEfforts, ", "))
	}
	if c.Model.Provider != ProviderOpenRouter {
		return fmt.Errorf("model.provider %q is not accepted (the only provider is %s)", c.Model.Provider, ProviderOpenRouter)
	}
	if strings.TrimSpace(c.Model.ID) == "" {
		return fmt.Errorf("model.id is empty: name an OpenRouter model id")
	}
	if hasControl(c.Model.ID) {
		return fmt.Errorf("model.id holds a control character")
	}
	for role, id := range c.Models {
		if !contains(ModelRoles, role) {
			return fmt.Errorf("unknown model role %q (the roles are: %s)", role, strings.Join(ModelRoles, ", "))
		}
		if strings.TrimSpace(id) == "" {
			return fmt.Errorf("models.%s is empty: name an OpenRouter model id or leave the role out", role)
		}
		if hasControl(id) {
			return fmt.Errorf("models.%s holds a control character", role)
		}
	}
	if !Bounds.MaxStepsPerTask.Contains(c.Limits.MaxStepsPerTask) {
		return fmt.Errorf("limits.max_steps_per_task %d is outside %d..%d", c.Limits.MaxStepsPerTask,
			Bounds.MaxStepsPerTask.Min, Bounds.MaxStepsPerTask.Max)
	}
	if !Bounds.MaxCostPerTaskUSD.Contains(c.Limits.MaxCostPerTaskUSD) {
		return fmt.Errorf("limits.max_cost_per_task_usd %g is outside %g..%g", c.Limits.MaxCostPerTaskUSD,
			Bounds.MaxCostPerTaskUSD.Min, Bounds.MaxCostPerTaskUSD.Max)
	}
	for _, name := range sortedKeys(c.MCPServers) {
		if err := validateMCPServer(name, c.MCPServers[name]); err != nil {
			return err
		}
	}
	if c.Delegation != nil {
		if len(c.Delegation.CanAsk) > MaxDelegationNames {
			return fmt.Errorf("delegation.can_ask names %d Dots, more than %d", len(c.Delegation.CanAsk), MaxDelegationNames)
		}
		for _, name := range c.Delegation.CanAsk {
			if !dotNameRe.MatchString(name) {
				return fmt.Errorf("delegation.can_ask: %q is not a Dot name (1 to 40 of [a-z0-9-])", name)
			}
		}
	}
	if c.UntrustedInput != nil {
		for _, name := range c.UntrustedInput.Ask {
			if name == MCPPermissionPrefix+"*" {
				continue
			}
			if err := c.knownPermission(name); err != nil {
				return fmt.Errorf("untrusted_input.ask: %w", err)
			}
		}
	}
	for _, name := range sortedKeys(c.AllowUntil) {
		if err := c.knownPermission(name); err != nil {
			return fmt.Errorf("allow_until: %w", err)
		}
		if _, err := time.Parse(time.RFC3339, c.AllowUntil[name]); err != nil {
			return fmt.Errorf("allow_until.%s %q is not an RFC 3339 time", name, c.AllowUntil[name])
		}
	}
	for _, name := range sortedKeys(c.Permissions) {
		d := c.Permissions[name]
		if d != Allow && d != Ask && d != Deny {
			return fmt.Errorf("permissions.%s is %q: use allow, ask or deny", name, d)
		}
		if _, known := LookupPermission(name); known {
			continue
		}
		server, isServer := MCPServerOfPermission(name)
		if !isServer {
			return fmt.Errorf("unknown permission %q", name)
		}
		if _, declared := c.MCPServers[server]; !declared {
			return fmt.Errorf("permission %q names MCP server %q, which the config does not declare", name, server)
		}
	}
	return nil
}

// ValidateMCPServer applies the rules of ref 7 to one MCP server entry under
// its name, as a config's validation does (add_mcp_server checks the entry
// the model asks for with it before the host sees it).
func ValidateMCPServer(name string, s MCPServerConfig) error { return validateMCPServer(name, s) }

func validateMCPServer(name string, s MCPServerConfig) error {
	if !mcpServerNameRe.MatchString(name) {
		return fmt.Errorf("mcp_servers name %q must be 1 to 32 of [a-z0-9-], starting with a letter or a digit", name)
	}
	where := "mcp_servers." + name
	hasCommand, hasURL := s.Command != "", s.URL != ""
	switch {
	case hasCommand == hasURL:
		return fmt.Errorf("%s needs exactly one of command or url", where)
	case hasCommand && len(s.Headers) > 0:
		return fmt.Errorf("%s.headers belong to a url server, not a command", where)
	case hasURL && (len(s.Args) > 0 || len(s.Env) > 0):
		return fmt.Errorf("%s.args and env belong to a command server, not a url", where)
	}
	if hasControl(s.Command) || hasControl(s.URL) {
		return fmt.Errorf("%s.command or url holds a control character", where)
	}
	for i, a := range s.Args {
		if strings.ContainsRune(a, 0) {
			return fmt.Errorf("%s.args[%d] holds a NUL byte", where, i)
		}
	}
	for _, k := range sortedKeys(s.Env) {
		if !envNameRe.MatchString(k) {
			return fmt.Errorf("%s.env: %q is not an environment variable name", where, k)
		}
		if strings.ContainsRune(s.Env[k], 0) {
			return fmt.Errorf("%s.env.%s holds a NUL byte", where, k)
		}
	}
	for _, k := range sortedKeys(s.Headers) {
		if !headerNameRe.MatchString(k) {
			return fmt.Errorf("%s.headers: %q is not an HTTP header name", where, k)
		}
		if hasControlBut(s.Headers[k], '\t') {
			return fmt.Errorf("%s.headers.%s holds a control character", where, k)
		}
	}
	if hasURL {
		u, err := url.Parse(s.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("%s.url must be an http or https URL", where)
		}
	}
	if s.TimeoutS != 0 && !Bounds.MCPTimeoutS.Contains(s.TimeoutS) {
		return fmt.Errorf("%s.timeout_s %d is outside %d..%d", where, s.TimeoutS, Bounds.MCPTimeoutS.Min, Bounds.MCPTimeoutS.Max)
	}
	if s.StartupTimeoutS != 0 && !Bounds.MCPStartupTimeoutS.Contains(s.StartupTimeoutS) {
		return fmt.Errorf("%s.startup_timeout_s %d is outside %d..%d", where, s.StartupTimeoutS,
			Bounds.MCPStartupTimeoutS.Min, Bounds.MCPStartupTimeoutS.Max)
	}
	seen := map[string]bool{}
	for _, sec := range s.Secrets {
		if sec == "" {
			return fmt.Errorf("%s.secrets has an empty name", where)
		}
		key := sec
		if hasURL {
			key = strings.ToLower(sec) // header names are case-insensitive
		}
		if seen[key] {
			return fmt.Errorf("%s.secrets names %q twice", where, sec)
		}
		seen[key] = true
		if hasCommand {
			if !envNameRe.MatchString(sec) {
				return fmt.Errorf("%s.secrets: %q is not an environment variable name", where, sec)
			}
			if _, ok := s.Env[sec]; ok {
				return fmt.Errorf("%s.secrets names %q, which env also writes", where, sec)
			}
		} else {
			if !headerNameRe.MatchString(sec) {
				return fmt.Errorf("%s.secrets: %q is not an HTTP header name", where, sec)
			}
			for h := range s.Headers {
				if strings.EqualFold(h, sec) {
					return fmt.Errorf("%s.secrets names %q, which headers also writes", where, sec)
				}
			}
		}
	}
	return nil
}

// knownPermission refuses a name that is neither a permission of the table
// nor the mcp.<server> of a declared server.
func (c RuntimeConfig) knownPermission(name string) error {
	if _, known := LookupPermission(name); known {
		return nil
	}
	if server, ok := MCPServerOfPermission(name); ok {
		if _, declared := c.MCPServers[server]; declared {
			return nil
		}
		return fmt.Errorf("permission %q names MCP server %q, which the config does not declare", name, server)
	}
	return fmt.Errorf("unknown permission %q", name)
}

// ServerNames returns the declared MCP servers by name, sorted.
func (c RuntimeConfig) ServerNames() []string { return sortedKeys(c.MCPServers) }

// Decision returns the pushed decision for a permission; a permission missing
// from the map is denied (the guest applies the resolved map as it is).
func (c RuntimeConfig) Decision(permission string) Decision {
	if d, ok := c.Permissions[permission]; ok {
		return d
	}
	return Deny
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
