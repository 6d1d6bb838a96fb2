// Package hostidentity is who a joined host is to the API: the
// ServiceAccount its agent's token belongs to, how an authenticated user
// is told to be a host's agent, and the label and name of the RBAC objects
// that give a host its guests' Secrets. It is a leaf, like Kubernetes'
// nodeidentifier: the host join that makes the ServiceAccount, the
// admission and API checks that restrict an agent to its own host, and the
// host access reconciler that keeps its Roles all read the same rule here,
// without linking the controllers.
package hostidentity

import (
	"strings"

	"k8s.io/apiserver/pkg/authentication/serviceaccount"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
)

// AccessLabel marks the Roles and RoleBindings the host access reconciler
// keeps, with the host's name as the value.
const AccessLabel = "dots.invisible.dev/host-access"

// ServiceAccount is the ServiceAccount (in dotsv1.SystemNamespace) whose
// token a joined host's agent uses: `invisible-dots host join` makes it.
func ServiceAccount(host string) string { return "host-" + host }

// HostOfUser is the host whose agent user (an authenticated user's name) is,
// when it is one: the ServiceAccount ServiceAccount(host) of the system
// namespace. A ServiceAccount of that name in another namespace is not.
func HostOfUser(user string) (string, bool) {
	ns, name, err := serviceaccount.SplitUsername(user)
	prefix := ServiceAccount("")
	if err != nil || ns != dotsv1.SystemNamespace || !strings.HasPrefix(name, prefix) || len(name) == len(prefix) {
		return "", false
	}
	return strings.TrimPrefix(name, prefix), true
}

// AccessBindingName is the Role, and its RoleBinding, giving host its
// guests' Secrets in a namespace. (The same name is the host's
// ClusterRoleBinding, a kind of its own.)
func AccessBindingName(host string) string { return "invisible-dots-host-" + host }

// GuestProxyServiceAccount is the control plane's identity toward the host
// agents' guest endpoints (in dotsv1.SystemNamespace): the Dots API asks
// tokens of it, for the endpoints' audience alone, and an agent serves
// nobody else. Not "host-": no host may be it.
const GuestProxyServiceAccount = "invisible-dots-guest-proxy"

// GuestProxyUser is GuestProxyServiceAccount's user name, as a TokenReview
// names it.
var GuestProxyUser = serviceaccount.MakeUsername(dotsv1.SystemNamespace, GuestProxyServiceAccount)
