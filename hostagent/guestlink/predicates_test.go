package guestlink

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
)

// TestSecretsChanged: a Dot whose Secret the control plane wrote (its
// annotation changed) is reconciled at once; any other change of its
// metadata is not.
func TestSecretsChanged(t *testing.T) {
	dot := func(annotations map[string]string) *dotsv1.Dot {
		return &dotsv1.Dot{ObjectMeta: metav1.ObjectMeta{Name: "helper", Annotations: annotations}}
	}
	for _, tc := range []struct {
		reason   string
		old, new map[string]string
		want     bool
	}{
		{"the first write of its Secret", nil, map[string]string{dotsv1.SecretsChangedAnnotation: "12"}, true},
		{"another write", map[string]string{dotsv1.SecretsChangedAnnotation: "12"}, map[string]string{dotsv1.SecretsChangedAnnotation: "15"}, true},
		{"an unrelated annotation", map[string]string{dotsv1.SecretsChangedAnnotation: "12"}, map[string]string{dotsv1.SecretsChangedAnnotation: "12", "note": "x"}, false},
		{"nothing", nil, nil, false},
	} {
		if got := secretsChanged.Update(event.UpdateEvent{ObjectOld: dot(tc.old), ObjectNew: dot(tc.new)}); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.reason, got, tc.want)
		}
	}
}
