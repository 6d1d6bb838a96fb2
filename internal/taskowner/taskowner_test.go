package taskowner

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	clientfake "sigs.k8s.io/controller-runtime/pkg/client/fake"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/internal/scheme"
)

// task is a Task as admission sees it: unstructured, as every custom
// resource reaches the plugins.
func task(dot string, owners ...metav1.OwnerReference) *unstructured.Unstructured {
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&dotsv1.Task{
		TypeMeta:   metav1.TypeMeta{APIVersion: dotsv1.GroupVersion.String(), Kind: "Task"},
		ObjectMeta: metav1.ObjectMeta{Name: "t", Namespace: "team-a", OwnerReferences: owners},
		Spec:       dotsv1.TaskSpec{DotName: dot, Description: "d"},
	})
	if err != nil {
		panic(err)
	}
	return &unstructured.Unstructured{Object: obj}
}

// TestAdmitMakesTheDotTheController: a new Task of a Dot that exists is
// made owned by it, as the Task controller would own it; anything else is
// left as it came for the controller, and nothing is ever refused.
func TestAdmitMakesTheDotTheController(t *testing.T) {
	helper := &dotsv1.Dot{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "helper", UID: "uid-helper"}}
	going := &dotsv1.Dot{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "going", UID: "uid-going",
		DeletionTimestamp: &metav1.Time{Time: time.Unix(1, 0)}, Finalizers: []string{"keep"}}}
	c := clientfake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(helper, going).Build()
	bound := metav1.OwnerReference{APIVersion: dotsv1.GroupVersion.String(), Kind: "Dot", Name: "helper", UID: "uid-helper",
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}
	other := metav1.OwnerReference{APIVersion: "example.com/v1", Kind: "Pipeline", Name: "p", UID: "uid-p", Controller: ptr.To(true)}
	plain := metav1.OwnerReference{APIVersion: "example.com/v1", Kind: "Note", Name: "n", UID: "uid-n"}
	tasks := dotsv1.GroupVersion.WithResource("tasks")
	for _, tc := range []struct {
		reason string
		obj    *unstructured.Unstructured
		sub    string
		op     admission.Operation
		reader func() (client.Reader, error)
		want   []metav1.OwnerReference
	}{
		{"a new Task of a Dot", task("helper"), "", admission.Create, nil, []metav1.OwnerReference{bound}},
		{"an owner that is not a controller stays beside", task("helper", plain), "", admission.Create, nil, []metav1.OwnerReference{plain, bound}},
		{"a Task with a controller already", task("helper", other), "", admission.Create, nil, []metav1.OwnerReference{other}},
		{"a Dot that does not exist yet", task("later"), "", admission.Create, nil, nil},
		{"a Dot being deleted", task("going"), "", admission.Create, nil, nil},
		{"a change, not a creation", task("helper"), "", admission.Update, nil, nil},
		{"the status", task("helper"), "status", admission.Create, nil, nil},
		{"no reader yet", task("helper"), "", admission.Create, func() (client.Reader, error) { return nil, errors.New("not running yet") }, nil},
	} {
		reader := tc.reader
		if reader == nil {
			reader = func() (client.Reader, error) { return c, nil }
		}
		p := New(reader)
		a := admission.NewAttributesRecord(tc.obj, nil, dotsv1.GroupVersion.WithKind("Task"), "team-a", "t", tasks, tc.sub, tc.op, &metav1.CreateOptions{}, false, nil)
		if err := p.Admit(context.Background(), a, nil); err != nil {
			t.Fatalf("%s: refused: %v", tc.reason, err)
		}
		if diff := cmp.Diff(tc.want, tc.obj.GetOwnerReferences()); diff != "" {
			t.Errorf("%s: owner references -want +got:\n%s", tc.reason, diff)
		}
	}
}
