package protocol

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const validConfig = `{"name":"fare-watch","instructions":"Write findings to fares.csv.",
"model":{"provider":"openrouter","id":"z-ai/glm-5.3-flash"},"models":{"summary":"openai/gpt-5-mini"},
"permissions":{"computer.exec":"allow","browser.identity.delete":"ask","mcp.time":"ask"},
"limits":{"max_steps_per_task":60,"max_cost_per_task_usd":1},
"mcp_servers":{"time":{"command":"uvx","args":["mcp-server-time"],"env":{"LOG_LEVEL":"warning"},"secrets":["TIME_API_KEY"],"timeout_s":120,"startup_timeout_s":60},
"search":{"url":"https://search.example/mcp","headers":{"X-Client":"dots"},"secrets":["Authorization"]}}}`

func TestDecodeRuntimeConfig(t *testing.T) {
	c, err := DecodeRuntimeConfig([]byte(validConfig))
	if err != nil {
		t.Fatalf("valid config refused: %v", err)
	}
	if diff := cmp.Diff([]string{"search", "time"}, c.ServerNames()); diff != "" {
		t.Errorf("servers (-want +got):\n%s", diff)
	}
	if c.Decision("computer.exec") != Allow || c.Decision("files.read") != Deny {
		t.Errorf("decisions: a listed one applies, a missing one is denied")
	}
	// Limits left out take CONFIG_BOUNDS' defaults.
	d, err := DecodeRuntimeConfig([]byte(`{"name":"x","model":{"provider":"openrouter","id":"m"},"permissions":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	if d.Limits.MaxStepsPerTask != Bounds.MaxStepsPerTask.Default || d.Limits.MaxCostPerTaskUSD != Bounds.MaxCostPerTaskUSD.Default {
		t.Errorf("limits = %+v, want the defaults", d.Limits)
	}
}

func TestRuntimeConfigRefusals(t *testing.T) {
	base := `{"name":"x","model":{"provider":"openrouter","id":"m"},"permissions":{},"limits":{}`
	tests := map[string]struct {
		body string
		want string
	}{
		"goal (old key)":         {base + `,"goal":"g"}`, `unknown field "goal"`},
		"computer (host's only)": {base + `,"computer":{"cpu":2}}`, `unknown field "computer"`},
		"name":                   {`{"name":"Bad_Name","model":{"provider":"openrouter","id":"m"},"permissions":{}}`, "must be 1 to 40 of [a-z0-9-]"},
		"provider":               {`{"name":"x","model":{"provider":"openai","id":"m"},"permissions":{}}`, `model.provider "openai" is not accepted`},
		"empty model":            {`{"name":"x","model":{"provider":"openrouter","id":" "},"permissions":{}}`, "model.id is empty"},
		"model role":             {base + `,"models":{"fast":"m"}}`, `unknown model role "fast" (the roles are: summary)`},
		"steps":                  {`{"name":"x","model":{"provider":"openrouter","id":"m"},"permissions":{},"limits":{"max_steps_per_task":1001}}`, "limits.max_steps_per_task 1001 is outside 1..1000"},
		"cost":                   {`{"name":"x","model":{"provider":"openrouter","id":"m"},"permissions":{},"limits":{"max_cost_per_task_usd":100.5}}`, "limits.max_cost_per_task_usd 100.5 is outside 0.01..100"},
		"unknown permission":     {`{"name":"x","model":{"provider":"openrouter","id":"m"},"permissions":{"web.search":"allow"}}`, `unknown permission "web.search"`},
		"bad decision":           {`{"name":"x","model":{"provider":"openrouter","id":"m"},"permissions":{"files.read":"yes"}}`, `permissions.files.read is "yes"`},
		"undeclared server":      {`{"name":"x","model":{"provider":"openrouter","id":"m"},"permissions":{"mcp.time":"allow"}}`, `names MCP server "time", which the config does not declare`},
		"server name":            {base + `,"mcp_servers":{"my_server":{"command":"x"}}}`, `mcp_servers name "my_server"`},
		"command and url":        {base + `,"mcp_servers":{"s":{"command":"x","url":"https://a"}}}`, "exactly one of command or url"},
		"neither":                {base + `,"mcp_servers":{"s":{}}}`, "exactly one of command or url"},
		"url scheme":             {base + `,"mcp_servers":{"s":{"url":"file:///etc"}}}`, "must be an http or https URL"},
		"headers on command":     {base + `,"mcp_servers":{"s":{"command":"x","headers":{"a":"b"}}}}`, "headers belong to a url server"},
		"timeout":                {base + `,"mcp_servers":{"s":{"command":"x","timeout_s":601}}}`, "timeout_s 601 is outside 1..600"},
		"secret twice":           {base + `,"mcp_servers":{"s":{"command":"x","secrets":["A","A"]}}}`, `names "A" twice`},
		"secret also env":        {base + `,"mcp_servers":{"s":{"command":"x","env":{"A":"1"},"secrets":["A"]}}}`, `names "A", which env also writes`},
		"secret also header":     {base + `,"mcp_servers":{"s":{"url":"https://a","headers":{"authorization":"x"},"secrets":["Authorization"]}}}`, "which headers also writes"},
		"two values":             {base + `} {}`, "more than one JSON value"},
		"can_ask name":           {base + `,"delegation":{"can_ask":["Helper"]}}`, `delegation.can_ask: "Helper" is not a Dot name`},
		"can_ask too many":       {base + `,"delegation":{"can_ask":[` + strings.TrimSuffix(strings.Repeat(`"d",`, 51), ",") + `]}}`, "names 51 Dots, more than 50"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := DecodeRuntimeConfig([]byte(tc.body))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("DecodeRuntimeConfig(%s) = %v\nwant an error with %q", tc.body, err, tc.want)
			}
		})
	}
}

func TestSecretsRequestValidate(t *testing.T) {
	tests := map[string]struct {
		req  SecretsRequest
		want string
	}{
		"ok":             {SecretsRequest{OpenRouterAPIKey: "sk-or-v1-abc", MCPSecrets: map[string]map[string]string{"search": {"Authorization": "Bearer x y"}}}, ""},
		"key with space": {SecretsRequest{OpenRouterAPIKey: "sk or"}, OpenRouterKeyRule},
		"key newline":    {SecretsRequest{OpenRouterAPIKey: "sk\nor"}, OpenRouterKeyRule},
		"nothing":        {SecretsRequest{}, "neither openrouter_api_key nor mcp_secrets"},
		"mcp alone":      {SecretsRequest{MCPSecrets: map[string]map[string]string{"search": {"Authorization": "Bearer x"}}}, ""},
		"mcp cleared":    {SecretsRequest{MCPSecrets: map[string]map[string]string{}}, ""},
		"mcp, bad key":   {SecretsRequest{OpenRouterAPIKey: "sk or", MCPSecrets: map[string]map[string]string{"search": {"A": "x"}}}, OpenRouterKeyRule},
		"secret ctrl":    {SecretsRequest{OpenRouterAPIKey: "k", MCPSecrets: map[string]map[string]string{"s": {"A": "a\tb"}}}, MCPSecretRule},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := tc.req.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Validate = %v, want ok", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("Validate = %v, want %q", err, tc.want)
			}
			if err != nil && (strings.Contains(err.Error(), "sk") || strings.Contains(err.Error(), "a\tb")) {
				t.Errorf("the error shows the value: %v", err)
			}
		})
	}
}
