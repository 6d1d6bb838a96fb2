package guestlink

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// defaults is the resolved map of a Dot that lists no permission: every
// permission of the registry at its default.
func defaults(edit map[string]protocol.Decision) map[string]protocol.Decision {
	m := map[string]protocol.Decision{
		"computer.exec": "allow", "computer.screenshot": "allow", "files.read": "allow", "files.write": "allow",
		"automations": "ask", "browser.identity.list": "allow", "browser.identity.create": "allow",
		"browser.identity.delete": "ask", "browser.identity.launch": "allow", "browser.identity.close": "allow",
		"browser.navigate": "allow", "browser.read": "allow", "browser.act": "allow", "mcp.servers.add": "ask", "dots.delegate": "ask",
	}
	for k, v := range edit {
		m[k] = v
	}
	return m
}

func TestRuntimeConfig(t *testing.T) {
	base := func(edit func(s *dotsv1.DotSpec)) *dotsv1.Dot {
		d := &dotsv1.Dot{
			ObjectMeta: metav1.ObjectMeta{Name: "fare-watch", Namespace: "team-a", Generation: 3},
			Spec: dotsv1.DotSpec{
				Model: dotsv1.ModelRef{Provider: dotsv1.OpenRouter, ID: "z-ai/glm-5.3-flash"},
				Computer: dotsv1.DotComputer{CPU: 2, Memory: ptr.To(resource.MustParse("4Gi")),
					Disk: ptr.To(resource.MustParse("40Gi")), IdleTimeout: &metav1.Duration{}, Host: "h1"},
				SecretRef: &dotsv1.SecretReference{Name: "fare-watch-secrets"},
			},
		}
		if edit != nil {
			edit(&d.Spec)
		}
		return d
	}
	tests := map[string]struct {
		reason  string
		dot     *dotsv1.Dot
		want    protocol.RuntimeConfig
		wantErr string
	}{
		"minimal": {
			reason: "a Dot that lists nothing gets every permission at its default and the limits' defaults; the computer and the secret reference stay on the host",
			dot:    base(nil),
			want: protocol.RuntimeConfig{
				Name: "fare-watch", Model: protocol.ModelRef{Provider: "openrouter", ID: "z-ai/glm-5.3-flash"},
				Permissions: defaults(nil),
				Limits:      protocol.Limits{MaxStepsPerTask: 60, MaxCostPerTaskUSD: 1},
			},
		},
		"no provider": {
			reason: "a typed client that leaves the provider out gets openrouter, as the CRD's default does",
			dot:    base(func(s *dotsv1.DotSpec) { s.Model.Provider = "" }),
			want: protocol.RuntimeConfig{
				Name: "fare-watch", Model: protocol.ModelRef{Provider: "openrouter", ID: "z-ai/glm-5.3-flash"},
				Permissions: defaults(nil),
				Limits:      protocol.Limits{MaxStepsPerTask: 60, MaxCostPerTaskUSD: 1},
			},
		},
		"reasoning": {
			reason: "spec.model.reasoning is asked of the model as it is written; absent (the cases above) is the model's own default",
			dot:    base(func(s *dotsv1.DotSpec) { s.Model.Reasoning = "high" }),
			want: protocol.RuntimeConfig{
				Name: "fare-watch", Model: protocol.ModelRef{Provider: "openrouter", ID: "z-ai/glm-5.3-flash", Reasoning: "high"},
				Permissions: defaults(nil),
				Limits:      protocol.Limits{MaxStepsPerTask: 60, MaxCostPerTaskUSD: 1},
			},
		},
		"reasoning the guest refuses": {
			reason:  "a value past the CRD's enum (a typed client, an older API server) is refused here as the guest would refuse it",
			dot:     base(func(s *dotsv1.DotSpec) { s.Model.Reasoning = "extreme" }),
			wantErr: "model.reasoning",
		},
		"listed permissions and limits": {
			reason: "listed permissions override their defaults and the others keep theirs; instructions, the summary model and the limits are carried as they are",
			dot: base(func(s *dotsv1.DotSpec) {
				s.Instructions = "Write findings to ~/workspace/fares.csv."
				s.Models = map[string]string{"summary": "openai/gpt-5-mini"}
				s.Permissions = map[string]dotsv1.Decision{"computer.exec": "ask", "browser.identity.delete": "allow", "automations": "deny"}
				s.Limits = dotsv1.DotLimits{MaxStepsPerTask: 10, MaxCostPerTaskUSD: 0.5}
			}),
			want: protocol.RuntimeConfig{
				Name: "fare-watch", Instructions: "Write findings to ~/workspace/fares.csv.",
				Model:       protocol.ModelRef{Provider: "openrouter", ID: "z-ai/glm-5.3-flash"},
				Models:      map[string]string{"summary": "openai/gpt-5-mini"},
				Permissions: defaults(map[string]protocol.Decision{"computer.exec": "ask", "browser.identity.delete": "allow", "automations": "deny"}),
				Limits:      protocol.Limits{MaxStepsPerTask: 10, MaxCostPerTaskUSD: 0.5},
			},
		},
		"mcp servers": {
			reason: "each declared server is carried with its secrets' names (never values) and gets mcp.<server>, ask by default unless listed",
			dot: base(func(s *dotsv1.DotSpec) {
				s.MCPServers = []dotsv1.MCPServer{
					{Name: "time", Command: "uvx", Args: []string{"mcp-server-time"}, Env: map[string]string{"LOG_LEVEL": "warning"},
						Secrets: []string{"TIME_API_KEY"}, TimeoutSeconds: ptr.To[int32](120), StartupTimeoutSeconds: ptr.To[int32](60)},
					{Name: "search", URL: "https://search.example/mcp", Headers: map[string]string{"X-Client": "dots"}, Secrets: []string{"Authorization"}},
				}
				s.Permissions = map[string]dotsv1.Decision{"mcp.search": "allow"}
			}),
			want: protocol.RuntimeConfig{
				Name: "fare-watch", Model: protocol.ModelRef{Provider: "openrouter", ID: "z-ai/glm-5.3-flash"},
				Permissions: defaults(map[string]protocol.Decision{"mcp.time": "ask", "mcp.search": "allow"}),
				Limits:      protocol.Limits{MaxStepsPerTask: 60, MaxCostPerTaskUSD: 1},
				MCPServers: map[string]protocol.MCPServerConfig{
					"time": {Command: "uvx", Args: []string{"mcp-server-time"}, Env: map[string]string{"LOG_LEVEL": "warning"},
						Secrets: []string{"TIME_API_KEY"}, TimeoutS: 120, StartupTimeoutS: 60},
					"search": {URL: "https://search.example/mcp", Headers: map[string]string{"X-Client": "dots"}, Secrets: []string{"Authorization"}},
				},
			},
		},
		"permission of an undeclared server": {
			reason: "a permission of a server the Dot does not declare (the CRD refuses it; a stored object from before is not trusted) is left out, so the guest denies it",
			dot:    base(func(s *dotsv1.DotSpec) { s.Permissions = map[string]dotsv1.Decision{"mcp.gone": "allow"} }),
			want: protocol.RuntimeConfig{
				Name: "fare-watch", Model: protocol.ModelRef{Provider: "openrouter", ID: "z-ai/glm-5.3-flash"},
				Permissions: defaults(nil),
				Limits:      protocol.Limits{MaxStepsPerTask: 60, MaxCostPerTaskUSD: 1},
			},
		},
		"delegation": {
			reason: "canAsk reaches the guest, which offers delegate_task by it; acceptsFrom is the host's to check and stays there",
			dot: base(func(s *dotsv1.DotSpec) {
				s.Delegation = &dotsv1.DotDelegation{CanAsk: []string{"researcher", "writer"}, AcceptsFrom: []string{"boss"}}
			}),
			want: protocol.RuntimeConfig{
				Name: "fare-watch", Model: protocol.ModelRef{Provider: "openrouter", ID: "z-ai/glm-5.3-flash"},
				Permissions: defaults(nil),
				Limits:      protocol.Limits{MaxStepsPerTask: 60, MaxCostPerTaskUSD: 1},
				Delegation:  &protocol.DelegationConfig{CanAsk: []string{"researcher", "writer"}},
			},
		},
		"accepts only": {
			reason: "a Dot that may ask nobody sends no delegation key, so a guest that predates it takes the config",
			dot:    base(func(s *dotsv1.DotSpec) { s.Delegation = &dotsv1.DotDelegation{AcceptsFrom: []string{"boss"}} }),
			want: protocol.RuntimeConfig{
				Name: "fare-watch", Model: protocol.ModelRef{Provider: "openrouter", ID: "z-ai/glm-5.3-flash"},
				Permissions: defaults(nil),
				Limits:      protocol.Limits{MaxStepsPerTask: 60, MaxCostPerTaskUSD: 1},
			},
		},
		"invalid model role": {
			reason:  "a spec the guest would refuse is refused here, with the guest's own rule",
			dot:     base(func(s *dotsv1.DotSpec) { s.Models = map[string]string{"fast": "x/y"} }),
			wantErr: `unknown model role "fast"`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := RuntimeConfig(tc.dot)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("%s\nRuntimeConfig() error = %v, want %q", tc.reason, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("%s\nRuntimeConfig() = %v", tc.reason, err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s\nRuntimeConfig() -want +got:\n%s", tc.reason, diff)
			}
			// What is pushed is what the guest's own decoder accepts, every
			// key of it.
			body, err := json.Marshal(got)
			if err != nil {
				t.Fatal(err)
			}
			back, err := protocol.DecodeRuntimeConfig(body)
			if err != nil {
				t.Fatalf("%s\nthe guest refuses the pushed configuration: %v", tc.reason, err)
			}
			if diff := cmp.Diff(got, back); diff != "" {
				t.Errorf("%s\nthe guest reads another configuration -pushed +read:\n%s", tc.reason, diff)
			}
		})
	}
}

// TestEveryReasoningEffortPassesThrough: each value the CRD's enum accepts
// reaches the guest unchanged and is one the guest accepts.
func TestEveryReasoningEffortPassesThrough(t *testing.T) {
	for _, effort := range protocol.ReasoningEfforts {
		d := &dotsv1.Dot{ObjectMeta: metav1.ObjectMeta{Name: "d"}, Spec: dotsv1.DotSpec{
			Model: dotsv1.ModelRef{ID: "openai/gpt-5", Reasoning: dotsv1.ReasoningEffort(effort)}}}
		got, err := RuntimeConfig(d)
		if err != nil || got.Model.Reasoning != effort {
			t.Errorf("reasoning %q: RuntimeConfig = %q, %v", effort, got.Model.Reasoning, err)
		}
	}
}

// The guardrails' fields travel to the guest: a server's trusted, the
// untrustedInput list, and allowUntil as RFC 3339 in UTC; names the config
// could not accept (a server no longer declared) are left out.
func TestRuntimeConfigGuardrails(t *testing.T) {
	until := metav1.NewTime(time.Date(2026, 12, 5, 18, 30, 0, 0, time.FixedZone("X", 3600)))
	d := &dotsv1.Dot{ObjectMeta: metav1.ObjectMeta{Name: "g", Namespace: "n"}, Spec: dotsv1.DotSpec{
		Model:          dotsv1.ModelRef{Provider: dotsv1.OpenRouter, ID: "m/x"},
		MCPServers:     []dotsv1.MCPServer{{Name: "notes", Command: "notes", Trusted: true}},
		UntrustedInput: &dotsv1.DotUntrustedInput{Ask: []string{"files.write", "mcp.*", "mcp.gone"}},
		AllowUntil:     map[string]metav1.Time{"computer.exec": until, "mcp.gone": until},
	}}
	c, err := RuntimeConfig(d)
	if err != nil {
		t.Fatal(err)
	}
	if !c.MCPServers["notes"].Trusted {
		t.Error("trusted did not travel")
	}
	if c.UntrustedInput == nil || strings.Join(c.UntrustedInput.Ask, ",") != "files.write,mcp.*" {
		t.Errorf("untrusted_input = %+v", c.UntrustedInput)
	}
	if len(c.AllowUntil) != 1 || c.AllowUntil["computer.exec"] != "2026-12-05T17:30:00Z" {
		t.Errorf("allow_until = %v", c.AllowUntil)
	}
	d.Spec.UntrustedInput, d.Spec.AllowUntil = nil, nil
	if c, _ := RuntimeConfig(d); c.UntrustedInput != nil || c.AllowUntil != nil {
		t.Errorf("absent fields came as %+v %v", c.UntrustedInput, c.AllowUntil)
	}
}
