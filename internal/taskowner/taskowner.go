// Package taskowner is an admission plugin of the embedded API server that
// makes a new Task's Dot its controller as the Task is made: the owner
// reference the Task controller would otherwise patch in a moment later
// (controllers.bindToDot), one write, one watch event and one reconcile
// fewer for every Task made by kubectl, the web client, a channel or a
// delegation, and one step fewer between a Task and its PENDING.
//
// It only adds: a Task that names no Dot, whose Dot does not exist (yet) or
// is being deleted, or that already has a controller, is left as it came,
// and the Task controller binds it, or reports why not, as before. Nor does
// it ever refuse a Task: a Dot it cannot read leaves the binding to the
// controller. A cluster without this plugin (server --kubeconfig) gets the
// same owner from the Task controller.
package taskowner

import (
	"context"
	"io"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
)

// Name is the plugin's name in the server's admission chain.
const Name = "InvisibleDotsTaskOwner"

// Plugin is the admission plugin. Reader gives a reader of Dots (the
// server's loopback client, which exists once the server runs).
type Plugin struct {
	*admission.Handler
	reader func() (client.Reader, error)
}

var _ admission.MutationInterface = (*Plugin)(nil)

// New returns the plugin; reader is asked for a reader of Dots at each new
// Task that needs one.
func New(reader func() (client.Reader, error)) *Plugin {
	return &Plugin{Handler: admission.NewHandler(admission.Create), reader: reader}
}

// Factory registers the plugin with an admission.Plugins.
func (p *Plugin) Factory(io.Reader) (admission.Interface, error) { return p, nil }

var tasks = dotsv1.GroupVersion.WithResource("tasks").GroupResource()

// Admit makes the Task's Dot its controller when the Task has none and the
// Dot exists and is not going.
func (p *Plugin) Admit(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetResource().GroupResource() != tasks || a.GetSubresource() != "" || a.GetOperation() != admission.Create {
		return nil
	}
	u, ok := a.GetObject().(*unstructured.Unstructured)
	if !ok || metav1.GetControllerOfNoCopy(u) != nil {
		return nil
	}
	name, _, _ := unstructured.NestedString(u.Object, "spec", "dotName")
	if name == "" {
		return nil
	}
	r, err := p.reader()
	if err != nil {
		return nil
	}
	dot := &dotsv1.Dot{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: a.GetNamespace(), Name: name}, dot); err != nil || !dot.DeletionTimestamp.IsZero() {
		return nil
	}
	// What controllerutil.SetControllerReference writes.
	u.SetOwnerReferences(append(u.GetOwnerReferences(), metav1.OwnerReference{
		APIVersion: dotsv1.GroupVersion.String(), Kind: "Dot", Name: dot.Name, UID: dot.UID,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
	}))
	return nil
}
