// Package admitfinalizer is an admission plugin of the embedded API server
// that sets, as a Dot or a Channel is made, the finalizer its central
// controller would otherwise add with a write of its own a moment later
// (as upstream's PersistentVolumeClaim protection plugin does for its
// finalizer). That write cost every new Dot one more request to the store
// and a new resourceVersion under the status writers that had just read the
// Dot, whose writes then lost with a Conflict and were computed again: of
// about thirteen writes a new Dot cost, one and most of its conflicts.
//
// Only a create is touched: a finalizer the controller removed to let its
// object go is never put back. The controllers still add a missing finalizer
// themselves (patch.EnsureFinalizer), for a cluster without this plugin
// (server --kubeconfig) and for objects made before it.
package admitfinalizer

import (
	"context"
	"io"
	"slices"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
)

// Name is the plugin's name in the server's admission chain.
const Name = "InvisibleDotsFinalizers"

// finalizers are the kinds whose finalizer is set at creation: those of the
// central controllers, which run wherever the API server does. A Computer's
// finalizer is its host agent's, added once the Computer is placed; set
// earlier, a Computer deleted before any host took it would wait forever.
var finalizers = map[schema.GroupResource]string{
	dotsv1.GroupVersion.WithResource("dots").GroupResource():     dotsv1.DotFinalizer,
	dotsv1.GroupVersion.WithResource("channels").GroupResource(): dotsv1.ChannelFinalizer,
}

// Plugin is the admission plugin.
type Plugin struct {
	*admission.Handler
}

var _ admission.MutationInterface = (*Plugin)(nil)

// New returns the plugin.
func New() *Plugin {
	return &Plugin{Handler: admission.NewHandler(admission.Create)}
}

// Factory registers the plugin with an admission.Plugins.
func (p *Plugin) Factory(io.Reader) (admission.Interface, error) { return p, nil }

// Admit adds the kind's finalizer to an object being made.
func (p *Plugin) Admit(_ context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	finalizer, ok := finalizers[a.GetResource().GroupResource()]
	if !ok || a.GetSubresource() != "" || a.GetOperation() != admission.Create {
		return nil
	}
	obj, err := meta.Accessor(a.GetObject())
	if err != nil {
		return nil // not an object with metadata: the schema refuses it
	}
	if !slices.Contains(obj.GetFinalizers(), finalizer) {
		obj.SetFinalizers(append(obj.GetFinalizers(), finalizer))
	}
	return nil
}
