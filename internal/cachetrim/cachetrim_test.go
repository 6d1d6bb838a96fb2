package cachetrim

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
)

func TestTransformStripsManagedFieldsAndLastAppliedOnly(t *testing.T) {
	d := &dotsv1.Dot{ObjectMeta: metav1.ObjectMeta{
		Name: "helper",
		Annotations: map[string]string{
			corev1.LastAppliedConfigAnnotation: `{"spec":{}}`,
			"dots.invisible.dev/keep":          "yes",
		},
		Labels:        map[string]string{"team": "a"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl-client-side-apply"}},
	}}
	out, err := Transform(d)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*dotsv1.Dot)
	if got.ManagedFields != nil {
		t.Errorf("managedFields = %v, want none", got.ManagedFields)
	}
	if _, ok := got.Annotations[corev1.LastAppliedConfigAnnotation]; ok {
		t.Errorf("the last-applied annotation is still cached")
	}
	if got.Annotations["dots.invisible.dev/keep"] != "yes" || got.Labels["team"] != "a" || got.Name != "helper" {
		t.Errorf("other metadata changed: %+v", got.ObjectMeta)
	}
}

func TestTransformLeavesNoEmptyAnnotationsAndPassesTombstones(t *testing.T) {
	u := &unstructured.Unstructured{}
	u.SetName("x")
	u.SetAnnotations(map[string]string{corev1.LastAppliedConfigAnnotation: "{}"})
	out, err := Transform(u)
	if err != nil {
		t.Fatal(err)
	}
	if a := out.(*unstructured.Unstructured).GetAnnotations(); a != nil {
		t.Errorf("annotations = %v, want none", a)
	}
	tomb := cache.DeletedFinalStateUnknown{Key: "ns/x", Obj: u}
	if out, err := Transform(tomb); err != nil || out != any(tomb) {
		t.Errorf("Transform(tombstone) = %v, %v; want it unchanged", out, err)
	}
	if out, err := Transform(42); err != nil || out != any(42) {
		t.Errorf("Transform(not an object) = %v, %v; want it unchanged", out, err)
	}
}

func TestManagedFieldsKeepsTheLastAppliedAnnotation(t *testing.T) {
	d := &dotsv1.Dot{ObjectMeta: metav1.ObjectMeta{
		Annotations:   map[string]string{corev1.LastAppliedConfigAnnotation: "{}"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
	}}
	out, err := ManagedFields(d)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*dotsv1.Dot)
	if got.ManagedFields != nil || got.Annotations[corev1.LastAppliedConfigAnnotation] != "{}" {
		t.Errorf("ManagedFields() = %+v; want managedFields gone and the annotation kept", got.ObjectMeta)
	}
}
