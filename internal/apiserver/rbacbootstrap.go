package apiserver

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/kubernetes"
	"k8s.io/component-base/version"
	"k8s.io/klog/v2"
	rbacrest "k8s.io/kubernetes/pkg/registry/rbac/rest"

	"github.com/invisible-dots/invisible-dots/internal/rbacpolicy"
)

// The default RBAC policy (cluster-admin, admin, edit, view, the system:
// roles) is reconciled by upstream's post-start hook, as kube-apiserver
// does at every start. That hook waits a whole second before its first try
// (wait.Poll, not PollImmediate), and /readyz waits for it: measured, it was
// the only readiness check failing from 1.3 s to 2.55 s of a warm start.
//
// Ours runs the same hook, upstream's code unchanged, in one of three ways,
// by the marker below (the Kubernetes version whose policy was reconciled
// last):
//   - the same version: the start is ready without waiting for it. The
//     policy is in the store already, and the hook runs on behind readiness,
//     putting back within seconds a default role someone deleted;
//   - no marker (the first start of a home): internal/rbacpolicy makes the
//     same policy at once, without the hook's second of sleep (and /readyz
//     is refused to anonymous callers until the policy is made), then the
//     hook runs on behind readiness as above. What the hook does besides,
//     copying the rules of roles renamed in old Kubernetes versions, has
//     nothing to copy in a store that had no policy. Should it fail, the
//     hook is waited for;
//   - another version (an upgrade, whose policy may rename roles): the
//     start waits for the hook as upstream does.
// Then the marker is written.

// rbacBootstrapHookName is the post-start hook (and its readiness check,
// poststarthook/<name>) that replaces upstream's rbac/bootstrap-roles.
const rbacBootstrapHookName = "invisible-dots/rbac-bootstrap"

// The marker: a ConfigMap in kube-system naming the Kubernetes version
// whose policy was reconciled last.
const (
	rbacMarkerNamespace = "kube-system"
	rbacMarkerName      = "invisible-dots-rbac-policy"
	rbacMarkerKey       = "kubernetesVersion"
)

// rbacBootstrapHook returns the hook.
func rbacBootstrapHook() (genericapiserver.PostStartHookFunc, error) {
	_, upstream, err := rbacrest.RESTStorageProvider{}.PostStartHook()
	if err != nil {
		return nil, fmt.Errorf("upstream's RBAC bootstrap hook: %w", err)
	}
	want := version.Get().GitVersion
	return func(hc genericapiserver.PostStartHookContext) error {
		client, err := kubernetes.NewForConfig(hc.LoopbackClientConfig)
		if err != nil {
			return err
		}
		behind := func() {
			go func() {
				if err := upstream(hc); err != nil {
					klog.ErrorS(err, "the default RBAC policy could not be reconciled after the start")
				}
			}()
		}
		switch by := rbacReconciledBy(hc, client); {
		case by == want:
			behind()
			return nil
		case by == "" && madeAtOnce(client):
			behind()
		default:
			if err := upstream(hc); err != nil {
				return err
			}
		}
		if err := markRBACReconciled(hc, client, want); err != nil {
			// The next start makes the policy again: slower, not wrong.
			klog.InfoS("the default RBAC policy is reconciled; its marker could not be written", "err", err.Error())
		}
		return nil
	}, nil
}

// madeAtOnce makes the default policy at once, and says whether it could.
func madeAtOnce(client kubernetes.Interface) bool {
	if err := rbacpolicy.Make(client); err != nil {
		klog.InfoS("the default RBAC policy could not be made at once; the start waits for upstream's reconciliation instead", "err", err.Error())
		return false
	}
	return true
}

// rbacReconciledBy is the version the marker names, "" when there is none.
func rbacReconciledBy(ctx context.Context, client kubernetes.Interface) string {
	cm, err := client.CoreV1().ConfigMaps(rbacMarkerNamespace).Get(ctx, rbacMarkerName, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	return cm.Data[rbacMarkerKey]
}

// markRBACReconciled writes the marker. kube-system is made by the system
// namespaces controller, which may not have run yet on a first start: then
// the marker is written by a later start.
func markRBACReconciled(ctx context.Context, client kubernetes.Interface, v string) error {
	cms := client.CoreV1().ConfigMaps(rbacMarkerNamespace)
	cm, err := cms.Get(ctx, rbacMarkerName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = cms.Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: rbacMarkerName, Namespace: rbacMarkerNamespace},
			Data:       map[string]string{rbacMarkerKey: v},
		}, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	cm.Data[rbacMarkerKey] = v
	_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
	return err
}
