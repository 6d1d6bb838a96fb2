// Package hostrestriction is an admission plugin of the embedded API server
// that keeps each host agent to its own host, as Kubernetes' NodeRestriction
// keeps each kubelet to its own Node. RBAC cannot say "only the Host named
// like you": the host agents' ClusterRole lets them write Hosts, Leases,
// Computers and the status of Dots, and this plugin refuses a host agent
// (hostidentity.ServiceAccount of the system namespace) any of those
// writes about another host:
//
//   - a Host, or its status, other than its own;
//   - a Lease other than its own heartbeat (the system namespace, its host's
//     name);
//   - a Computer not placed on its host (spec.nodeName as it was), and the
//     making of any Computer (the control plane makes them);
//   - the status of a Dot whose Computer is not on its host.
//
// Reads are RBAC's alone; anyone who is not a host agent is not looked at.
package hostrestriction

import (
	"context"
	"fmt"
	"io"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/internal/hostidentity"
)

// Name is the plugin's name in the server's admission chain.
const Name = "InvisibleDotsHostRestriction"

// Plugin is the admission plugin. Reader is asked for a reader of
// Computers each time a Dot's status is written (the server's loopback
// client, which exists once the server runs).
type Plugin struct {
	*admission.Handler
	reader func() (client.Reader, error)
}

var _ admission.ValidationInterface = (*Plugin)(nil)

// New returns the plugin.
func New(reader func() (client.Reader, error)) *Plugin {
	return &Plugin{Handler: admission.NewHandler(admission.Create, admission.Update, admission.Delete), reader: reader}
}

// Factory registers the plugin with an admission.Plugins.
func (p *Plugin) Factory(io.Reader) (admission.Interface, error) { return p, nil }

var (
	hosts     = dotsv1.GroupVersion.WithResource("hosts").GroupResource()
	computers = dotsv1.GroupVersion.WithResource("computers").GroupResource()
	dots      = dotsv1.GroupVersion.WithResource("dots").GroupResource()
	leases    = schema.GroupResource{Group: coordinationv1.GroupName, Resource: "leases"}
)

// Validate refuses a host agent's write about another host.
func (p *Plugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	host, ok := hostidentity.HostOfUser(a.GetUserInfo().GetName())
	if !ok {
		return nil
	}
	switch a.GetResource().GroupResource() {
	case hosts:
		if a.GetName() != host {
			return forbid(a, host, "a host agent writes its own Host only")
		}
	case leases:
		if a.GetNamespace() != dotsv1.SystemNamespace || a.GetName() != host {
			return forbid(a, host, "a host agent renews its own Lease only ("+dotsv1.SystemNamespace+"/"+host+")")
		}
	case computers:
		if a.GetOperation() == admission.Create {
			return forbid(a, host, "the control plane makes Computers, not a host agent")
		}
		if nodeName(a.GetOldObject()) != host {
			return forbid(a, host, "a host agent writes the Computers placed on its host only")
		}
	case dots:
		if a.GetSubresource() != "status" {
			return nil // RBAC gives host agents no other write of a Dot
		}
		on, err := p.computerHost(ctx, a.GetNamespace(), a.GetName())
		if err != nil {
			return apierrors.NewInternalError(fmt.Errorf("%s: read the Computer of Dot %s/%s: %w", Name, a.GetNamespace(), a.GetName(), err))
		}
		if on != host {
			return forbid(a, host, "a host agent writes the status of the Dots whose Computer is on its host only")
		}
	}
	return nil
}

// computerHost is the host the Dot's Computer (same name) is placed on; ""
// when it has none yet.
func (p *Plugin) computerHost(ctx context.Context, namespace, name string) (string, error) {
	r, err := p.reader()
	if err != nil {
		return "", err
	}
	c := &dotsv1.Computer{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, c); err != nil {
		if apierrors.IsNotFound(err) {
			return "", nil
		}
		return "", err
	}
	return c.Spec.NodeName, nil
}

// nodeName is spec.nodeName of a Computer as the server holds it (custom
// resources reach admission as unstructured objects).
func nodeName(obj any) string {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return ""
	}
	n, _, _ := unstructured.NestedString(u.Object, "spec", "nodeName")
	return n
}

func forbid(a admission.Attributes, host, why string) error {
	what := a.GetResource().Resource
	if a.GetSubresource() != "" {
		what += "/" + a.GetSubresource()
	}
	return admission.NewForbidden(a, fmt.Errorf("the agent of host %s may not %s %s %q: %s", host, strings.ToLower(string(a.GetOperation())), what, a.GetName(), why))
}
