// Package rbac embeds the ClusterRoles the server installs at start, so a
// host agent joined with `invisible-dots host join` has its roles whether or
// not config/default was applied by hand.
package rbac

import _ "embed"

// HostAgentRole is the generated ClusterRole of every host agent, followed
// by its Role of the same name in the system namespace (host_agent/role.yaml,
// written by `make manifests` from the markers in hostagent/).
//
//go:embed host_agent/role.yaml
var HostAgentRole []byte

// HostAgentSecretsRole is the ClusterRole a host agent is given namespace by
// namespace.
//
//go:embed host_agent_secrets_role.yaml
var HostAgentSecretsRole []byte
