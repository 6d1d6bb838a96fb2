// Package rbac embeds the ClusterRoles the server installs at start, so a
// host agent joined with `invisible-dots host join` and a person given a role
// in a namespace have their roles whether or not config/default was applied
// by hand.
package rbac

import _ "embed"

// HostAgentRole is the generated ClusterRole of every host agent, followed
// by its Role of the same name in the system namespace (host_agent/role.yaml,
// written by `make manifests` from the markers in hostagent/).
//
//go:embed host_agent/role.yaml
var HostAgentRole []byte

// PeopleRoles are dots-editor, dots-viewer and dots-doctor, ClusterRoles
// in one document stream.
//
//go:embed people_roles.yaml
var PeopleRoles []byte

// DotsAPIAccess opens the people's paths of the Dots API to every
// authenticated user (a ClusterRole and its ClusterRoleBinding): each route
// decides with resource attributes.
//
//go:embed dots_api_access.yaml
var DotsAPIAccess []byte

// DotsAPIDiscovery lets every authenticated user read where the Dots API is
// served against a cluster that is not ours, and the server's own account
// write it (two Roles and their RoleBindings in the system namespace).
//
//go:embed dots_api_discovery.yaml
var DotsAPIDiscovery []byte
