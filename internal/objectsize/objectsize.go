// Package objectsize is an admission plugin of the embedded API server that
// refuses a write of this product's kinds whose object would be too large to
// store, as a 413 that names the limit. The request bound alone does not
// do it: a patch within it can grow an object past what the resource store
// takes in one write (kine's 2 MiB gRPC message), which would fail as a 500
// with gRPC's text and the object unchanged.
package objectsize

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/admission"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
)

// Name is the plugin's name in the server's admission chain.
const Name = "InvisibleDotsObjectSize"

// MaxBytes bounds an object of this product's kinds as JSON, and a
// request's body: below the 2 MiB the resource store takes in one message,
// leaving room for what is stored beside the object (its managed fields
// grow with it, and the store's own framing).
const MaxBytes = 3 << 19 // 1.5 MiB, etcd's own default request bound

// Plugin is the admission plugin.
type Plugin struct {
	*admission.Handler
	max int
}

var _ admission.ValidationInterface = (*Plugin)(nil)

// New returns the plugin with the bound MaxBytes.
func New() *Plugin { return newWithMax(MaxBytes) }

func newWithMax(max int) *Plugin {
	return &Plugin{Handler: admission.NewHandler(admission.Create, admission.Update), max: max}
}

// Factory registers the plugin with an admission.Plugins.
func (p *Plugin) Factory(io.Reader) (admission.Interface, error) { return p, nil }

// Validate refuses an object of the dots.invisible.dev group larger than the
// bound, whatever the write (a create, an update, a patch, a status write).
func (p *Plugin) Validate(_ context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetResource().Group != dotsv1.GroupVersion.Group || a.GetObject() == nil {
		return nil
	}
	b, err := json.Marshal(a.GetObject())
	if err != nil {
		// Not this plugin's to judge: the store's own encoding says why.
		return nil
	}
	if len(b) <= p.max {
		return nil
	}
	kind := a.GetKind().Kind
	name := a.GetName()
	if ns := a.GetNamespace(); ns != "" {
		name = ns + "/" + name
	}
	what := "its spec"
	if a.GetSubresource() != "" {
		what = "its " + a.GetSubresource()
	}
	return apierrors.NewRequestEntityTooLargeError(fmt.Sprintf(
		"the %s %s would take %s, over the %s one object may take: make %s smaller (long text belongs in the Dot's files, which its instructions can name)",
		kind, name, mib(len(b)), mib(p.max), what))
}

func mib(n int) string { return fmt.Sprintf("%.2f MiB (%d bytes)", float64(n)/(1<<20), n) }
