// Package scheme is the runtime.Scheme every client of the control plane
// uses: client-go's built-in kinds and ours. It is a leaf so that a command,
// an agent or an admission check builds its client without linking the
// central controllers, which use the same Scheme.
package scheme

import (
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
)

// Scheme knows the built-in kinds and ours.
var Scheme = runtime.NewScheme()

func init() {
	if err := clientgoscheme.AddToScheme(Scheme); err != nil {
		panic(err)
	}
	if err := dotsv1.AddToScheme(Scheme); err != nil {
		panic(err)
	}
}
