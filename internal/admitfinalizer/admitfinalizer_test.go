package admitfinalizer

import (
	"context"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apiserver/pkg/admission"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
)

func object(kind string, finalizers ...string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": dotsv1.GroupVersion.String(), "kind": kind,
		"metadata": map[string]any{"name": "x", "namespace": "team-a"},
	}}
	u.SetFinalizers(finalizers)
	return u
}

// TestAdmitSetsTheFinalizerOfANewObject: a Dot or a Channel is made with
// its controller's finalizer, once, beside others it has; a change, a
// status write, a Computer and a Task are left alone.
func TestAdmitSetsTheFinalizerOfANewObject(t *testing.T) {
	p := New()
	for _, c := range []struct {
		reason   string
		obj      *unstructured.Unstructured
		resource string
		sub      string
		op       admission.Operation
		want     []string
	}{
		{"a new Dot", object("Dot"), "dots", "", admission.Create, []string{dotsv1.DotFinalizer}},
		{"a new Dot with a finalizer of its own", object("Dot", "example.com/keep"), "dots", "", admission.Create, []string{"example.com/keep", dotsv1.DotFinalizer}},
		{"a new Dot that has it", object("Dot", dotsv1.DotFinalizer), "dots", "", admission.Create, []string{dotsv1.DotFinalizer}},
		{"a new Channel", object("Channel"), "channels", "", admission.Create, []string{dotsv1.ChannelFinalizer}},
		{"a Dot whose finalizer was removed to let it go", object("Dot"), "dots", "", admission.Update, nil},
		{"a Dot's status", object("Dot"), "dots", "status", admission.Create, nil},
		{"a new Computer: its host agent's, once placed", object("Computer"), "computers", "", admission.Create, nil},
		{"a new Task", object("Task"), "tasks", "", admission.Create, nil},
	} {
		res := dotsv1.GroupVersion.WithResource(c.resource)
		a := admission.NewAttributesRecord(c.obj, nil, dotsv1.GroupVersion.WithKind(c.obj.GetKind()), "team-a", "x", res, c.sub, c.op, &metav1.CreateOptions{}, false, nil)
		if c.op == admission.Update {
			a = admission.NewAttributesRecord(c.obj, object(c.obj.GetKind(), dotsv1.DotFinalizer), dotsv1.GroupVersion.WithKind(c.obj.GetKind()), "team-a", "x", res, c.sub, c.op, &metav1.UpdateOptions{}, false, nil)
		}
		if p.Handles(c.op) {
			if err := p.Admit(context.Background(), a, nil); err != nil {
				t.Fatalf("%s: %v", c.reason, err)
			}
		}
		if got := c.obj.GetFinalizers(); !slices.Equal(got, c.want) {
			t.Errorf("%s: finalizers %q, want %q", c.reason, got, c.want)
		}
	}
}
