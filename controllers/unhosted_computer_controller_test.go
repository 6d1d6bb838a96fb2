package controllers

import (
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	clientfake "sigs.k8s.io/controller-runtime/pkg/client/fake"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
)

func TestUnhostedComputerDeletion(t *testing.T) {
	cases := map[string]struct {
		reason    string
		status    dotsv1.ComputerStatus
		wantGone  bool
		wantState dotsv1.ComputerState
	}{
		"never started": {
			reason:   "no host ever ran it: there is nothing to destroy, so the finalizer goes",
			status:   dotsv1.ComputerStatus{State: dotsv1.ComputerProvisioning},
			wantGone: true,
		},
		"ran on a host": {
			reason:    "a host agent ran it: only a host agent can destroy its VM, so it waits and says so",
			status:    dotsv1.ComputerStatus{State: dotsv1.ComputerStopped, HostBootID: "boot-1", PID: 0},
			wantState: dotsv1.ComputerDeleting,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			now := metav1.NewTime(time.Unix(1_800_000_000, 0))
			c := &dotsv1.Computer{
				ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "default", Finalizers: []string{ComputerFinalizer}, DeletionTimestamp: &now},
				Status:     tc.status,
			}
			cl := clientfake.NewClientBuilder().WithScheme(Scheme).WithObjects(c).WithStatusSubresource(c).Build()
			r := &UnhostedComputerReconciler{Client: cl, Clock: clocktesting.NewFakePassiveClock(now.Time)}
			if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "default", Name: "c"}}); err != nil {
				t.Fatalf("%s: Reconcile: %v", tc.reason, err)
			}
			got := &dotsv1.Computer{}
			err := cl.Get(context.Background(), client.ObjectKeyFromObject(c), got)
			if tc.wantGone {
				if !apierrors.IsNotFound(err) {
					t.Fatalf("%s: the Computer is still there (err %v, finalizers %v)", tc.reason, err, got.Finalizers)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Status.State != tc.wantState || len(got.Finalizers) != 1 {
				t.Errorf("%s: state %s finalizers %v, want %s with the finalizer kept", tc.reason, got.Status.State, got.Finalizers, tc.wantState)
			}
		})
	}
}
