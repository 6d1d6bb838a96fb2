// Package tasklabel is an admission plugin of the embedded API server that
// labels every Task with its Dot (dotsv1.DotLabel = spec.dotName) as it is
// made or changed, so one Dot's tasks are listed by a label selector (the
// command line, the web client's Tasks page and Inbox) instead of reading
// every Task of the namespace and filtering (ref 9.6's tasks of a Dot). A
// Task's dotName cannot change (its CRD's rule), so neither can the label:
// a write that sets it to another Dot is set back here.
//
// A cluster without this plugin (server --kubeconfig) gets the same label
// from the Task controller, a moment after the Task is made.
package tasklabel

import (
	"context"
	"io"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apiserver/pkg/admission"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
)

// Name is the plugin's name in the server's admission chain.
const Name = "InvisibleDotsTaskDotLabel"

// Plugin is the admission plugin.
type Plugin struct {
	*admission.Handler
}

var _ admission.MutationInterface = (*Plugin)(nil)

// New returns the plugin.
func New() *Plugin {
	return &Plugin{Handler: admission.NewHandler(admission.Create, admission.Update)}
}

// Factory registers the plugin with an admission.Plugins.
func (p *Plugin) Factory(io.Reader) (admission.Interface, error) { return p, nil }

var tasks = dotsv1.GroupVersion.WithResource("tasks").GroupResource()

// Admit sets the Task's Dot label from its spec.dotName. A dotName that is
// not a valid label value is left to the schema's validation, which refuses
// it with its own words.
func (p *Plugin) Admit(_ context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetResource().GroupResource() != tasks || a.GetSubresource() != "" {
		return nil
	}
	u, ok := a.GetObject().(*unstructured.Unstructured)
	if !ok {
		return nil
	}
	dot, _, _ := unstructured.NestedString(u.Object, "spec", "dotName")
	if dot == "" || len(validation.IsValidLabelValue(dot)) > 0 {
		return nil
	}
	labels := u.GetLabels()
	if labels[dotsv1.DotLabel] == dot {
		return nil
	}
	if labels == nil {
		labels = map[string]string{}
	}
	labels[dotsv1.DotLabel] = dot
	u.SetLabels(labels)
	return nil
}
