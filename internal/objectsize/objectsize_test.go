package objectsize

import (
	"context"
	"net/http"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
)

func dotOf(instructions string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": dotsv1.GroupVersion.String(), "kind": "Dot",
		"metadata": map[string]any{"name": "big", "namespace": "default"},
		"spec":     map[string]any{"instructions": instructions},
	}}
}

func attrs(obj runtime.Object, resource, sub string, op admission.Operation) admission.Attributes {
	gvr := dotsv1.GroupVersion.WithResource(resource)
	if resource == "secrets" {
		gvr.Group, gvr.Version = "", "v1"
	}
	return admission.NewAttributesRecord(obj, nil, gvr.GroupVersion().WithKind("Dot"), "default", "big", gvr, sub, op, nil, false, &user.DefaultInfo{Name: "someone"})
}

func TestObjectSize(t *testing.T) {
	p := newWithMax(1000)
	ctx := context.Background()
	small, large := dotOf(strings.Repeat("a", 100)), dotOf(strings.Repeat("a", 2000))
	for _, c := range []struct {
		name    string
		a       admission.Attributes
		refused bool
	}{
		{"a small Dot", attrs(small, "dots", "", admission.Create), false},
		{"a large Dot made", attrs(large, "dots", "", admission.Create), true},
		// A patch within the request bound that grows the object.
		{"a Dot grown by an update", attrs(large, "dots", "", admission.Update), true},
		{"a status grown", attrs(large, "dots", "status", admission.Update), true},
		{"another group's object", attrs(large, "secrets", "", admission.Create), false},
	} {
		err := p.Validate(ctx, c.a, nil)
		if !c.refused {
			if err != nil {
				t.Errorf("%s: refused: %v", c.name, err)
			}
			continue
		}
		if !apierrors.IsRequestEntityTooLargeError(err) || apierrors.ReasonForError(err) != "RequestEntityTooLarge" {
			t.Errorf("%s: %v; want a 413", c.name, err)
			continue
		}
		if status := err.(apierrors.APIStatus).Status(); status.Code != http.StatusRequestEntityTooLarge {
			t.Errorf("%s: code %d; want 413", c.name, status.Code)
		}
		for _, want := range []string{"Dot default/big", "over the 0.00 MiB (1000 bytes)", "smaller"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %q does not say %q", c.name, err, want)
			}
		}
	}
	if MaxBytes >= 2<<20 {
		t.Errorf("MaxBytes %d is not below the store's 2 MiB message", MaxBytes)
	}
}
