package guestlink

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// RuntimeConfig is what PUT /v1/agent/config carries for a Dot (ref 7): its
// spec less the computer and the secret reference, with every permission
// resolved (protocol.ResolvePermissions: one decision for each permission the
// registry knows and one per declared MCP server, the defaults applied), and
// the limits' defaults filled in. The guest applies the map as it is, so the
// defaults live in protocol alone. It is validated as the guest validates it.
func RuntimeConfig(dot *dotsv1.Dot) (protocol.RuntimeConfig, error) {
	spec := dot.Spec
	listed := make(map[string]protocol.Decision, len(spec.Permissions))
	for name, d := range spec.Permissions {
		listed[name] = protocol.Decision(d)
	}
	servers := make(map[string]protocol.MCPServerConfig, len(spec.MCPServers))
	names := make([]string, 0, len(spec.MCPServers))
	for _, s := range spec.MCPServers {
		names = append(names, s.Name)
		servers[s.Name] = protocol.MCPServerConfig{
			Command:         s.Command,
			Args:            append([]string(nil), s.Args...),
			Env:             maps.Clone(s.Env),
			URL:             s.URL,
			Headers:         maps.Clone(s.Headers),
			Secrets:         append([]string(nil), s.Secrets...),
			TimeoutS:        int(deref(s.TimeoutSeconds)),
			StartupTimeoutS: int(deref(s.StartupTimeoutSeconds)),
			Trusted:         s.Trusted,
		}
	}
	c := protocol.RuntimeConfig{
		Name:         dot.Name,
		Instructions: spec.Instructions,
		Model: protocol.ModelRef{
			Provider:  cmp.Or(string(spec.Model.Provider), protocol.ProviderOpenRouter),
			ID:        spec.Model.ID,
			Reasoning: string(spec.Model.Reasoning),
		},
		Models:      maps.Clone(spec.Models),
		Permissions: protocol.ResolvePermissions(listed, names),
		Limits: protocol.Limits{
			MaxStepsPerTask:   int(spec.Limits.MaxStepsPerTask),
			MaxCostPerTaskUSD: spec.Limits.MaxCostPerTaskUSD,
		},
	}
	if len(servers) > 0 {
		c.MCPServers = servers
	}
	if spec.Delegation != nil && len(spec.Delegation.CanAsk) > 0 {
		c.Delegation = &protocol.DelegationConfig{CanAsk: append([]string(nil), spec.Delegation.CanAsk...)}
	}
	if spec.UntrustedInput != nil {
		c.UntrustedInput = &protocol.UntrustedInputConfig{Ask: []string{}}
		for _, p := range spec.UntrustedInput.Ask {
			// A server taken out of mcpServers leaves nothing to ask.
			if server, ok := protocol.MCPServerOfPermission(p); ok && server != "*" && !slices.Contains(names, server) {
				continue
			}
			c.UntrustedInput.Ask = append(c.UntrustedInput.Ask, p)
		}
	}
	for p, until := range spec.AllowUntil {
		if server, ok := protocol.MCPServerOfPermission(p); ok && !slices.Contains(names, server) {
			continue
		} else if _, known := protocol.LookupPermission(p); !ok && !known {
			continue
		}
		if c.AllowUntil == nil {
			c.AllowUntil = map[string]string{}
		}
		c.AllowUntil[p] = until.UTC().Format(time.RFC3339)
	}
	c.ApplyDefaults()
	if err := c.Validate(); err != nil {
		return protocol.RuntimeConfig{}, fmt.Errorf("the Dot's spec does not make a runtime configuration: %w", err)
	}
	return c, nil
}

func deref(p *int32) int32 {
	if p == nil {
		return 0
	}
	return *p
}
