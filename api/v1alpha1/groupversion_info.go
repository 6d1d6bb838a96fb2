// Package v1alpha1 holds the resource kinds of group dots.invisible.dev:
// Dot, Computer, Task and Approval.
//
// The numbers in the validation markers are the reference's CONFIG_BOUNDS,
// whose one Go home is guest/protocol.Bounds; markers cannot name a Go
// constant, so bounds_test.go reads the generated CRDs back and fails when a
// marker and the table differ.
//
// +kubebuilder:object:generate=true
// +groupName=dots.invisible.dev
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of these kinds.
	GroupVersion = schema.GroupVersion{Group: "dots.invisible.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the kinds with a scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the kinds of this group version to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
