package tasklabel

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apiserver/pkg/admission"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
)

func task(dot string, labels map[string]string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": dotsv1.GroupVersion.String(), "kind": "Task",
		"metadata": map[string]any{"name": "t", "namespace": "team-a"},
		"spec":     map[string]any{"dotName": dot, "description": "d"},
	}}
	u.SetLabels(labels)
	return u
}

// TestAdmitLabelsATaskWithItsDot: made or changed, a Task carries its Dot's
// label, set back when a write names another; other kinds, subresources and
// a dotName the schema will refuse are left alone.
func TestAdmitLabelsATaskWithItsDot(t *testing.T) {
	p := New()
	res := dotsv1.GroupVersion.WithResource("tasks")
	for _, c := range []struct {
		reason   string
		obj      *unstructured.Unstructured
		resource string
		sub      string
		op       admission.Operation
		want     string
	}{
		{"a new Task", task("helper", nil), "tasks", "", admission.Create, "helper"},
		{"a Task with other labels", task("helper", map[string]string{"team": "x"}), "tasks", "", admission.Create, "helper"},
		{"a write naming another Dot", task("helper", map[string]string{dotsv1.DotLabel: "other"}), "tasks", "", admission.Update, "helper"},
		{"the status", task("helper", nil), "tasks", "status", admission.Update, ""},
		{"another kind", task("helper", nil), "approvals", "", admission.Create, ""},
		{"a dotName the schema refuses", task("Not A Label!", nil), "tasks", "", admission.Create, ""},
	} {
		r := res
		r.Resource = c.resource
		a := admission.NewAttributesRecord(c.obj, nil, dotsv1.GroupVersion.WithKind("Task"), "team-a", "t", r, c.sub, c.op, &metav1.CreateOptions{}, false, nil)
		if err := p.Admit(context.Background(), a, nil); err != nil {
			t.Fatalf("%s: %v", c.reason, err)
		}
		if got := c.obj.GetLabels()[dotsv1.DotLabel]; got != c.want {
			t.Errorf("%s: label %q, want %q", c.reason, got, c.want)
		}
	}
}
