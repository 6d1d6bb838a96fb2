package integration

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
)

var _ = Describe("A Task's Dot label", func() {
	It("is set at admission from spec.dotName, set back when a write names another Dot, and lists one Dot's tasks", func() {
		name := "label-" + rand.String(6)
		t := &dotsv1.Task{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec:       dotsv1.TaskSpec{DotName: "label-dot", Description: "labelled"},
		}
		Expect(k8sClient.Create(suiteCtx, t)).To(Succeed())
		DeferCleanup(func() { _ = k8sClient.Delete(context.Background(), t) })
		Expect(t.Labels).To(HaveKeyWithValue(dotsv1.DotLabel, "label-dot"), "the created Task as the server answered it")

		base := t.DeepCopy()
		t.Labels[dotsv1.DotLabel] = "another-dot"
		Expect(k8sClient.Patch(suiteCtx, t, client.MergeFrom(base))).To(Succeed())
		Expect(t.Labels).To(HaveKeyWithValue(dotsv1.DotLabel, "label-dot"), "a label naming another Dot is set back")

		var list dotsv1.TaskList
		Expect(k8sClient.List(suiteCtx, &list, client.InNamespace("default"), client.MatchingLabels{dotsv1.DotLabel: "label-dot"})).To(Succeed())
		Expect(list.Items).To(HaveLen(1))
		Expect(list.Items[0].Name).To(Equal(name))
	})
})
