package controllers

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
)

// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;update;patch

// pruneMCPSecrets deletes from the Dot's Secret (spec.secretRef) every MCP
// secret its config no longer names, its server removed or its name dropped
// (ref 4.3: none is kept that nothing uses), in the reconcile that sees the
// config change. The Secret is read with reader, uncached: the control plane
// neither lists nor watches Secrets. The Event names the keys, never a value.
// It returns the keys deleted.
func (r *DotReconciler) pruneMCPSecrets(ctx context.Context, dot *dotsv1.Dot) ([]string, error) {
	if r.SecretReader == nil || dot.Spec.SecretRef == nil || dot.Spec.SecretRef.Name == "" {
		return nil, nil
	}
	sec := &corev1.Secret{}
	err := r.SecretReader.Get(ctx, client.ObjectKey{Namespace: dot.Namespace, Name: dot.Spec.SecretRef.Name}, sec)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read Secret %s/%s (spec.secretRef) to drop MCP secrets no longer named: %w", dot.Namespace, dot.Spec.SecretRef.Name, err)
	}
	named := map[string]bool{}
	for _, s := range dot.Spec.MCPServers {
		for _, n := range s.Secrets {
			named[dotsv1.MCPSecretKey(s.Name, n)] = true
		}
	}
	var gone []string
	for k := range sec.Data {
		if strings.HasPrefix(k, dotsv1.MCPSecretKeyPrefix) && !named[k] {
			gone = append(gone, k)
		}
	}
	if len(gone) == 0 {
		return nil, nil
	}
	sort.Strings(gone)
	base := sec.DeepCopy()
	for _, k := range gone {
		delete(sec.Data, k)
	}
	// Over the version read: a secret set meanwhile is not deleted blind.
	if err := r.Client.Patch(ctx, sec, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return nil, fmt.Errorf("drop MCP secrets no longer named from Secret %s/%s: %w", sec.Namespace, sec.Name, err)
	}
	if r.Recorder != nil {
		r.Recorder.Eventf(dot, sec, corev1.EventTypeNormal, "MCPSecretsDeleted", "Delete",
			"Deleted %s from Secret %s: the config no longer names them", strings.Join(gone, ", "), sec.Name)
	}
	return gone, nil
}
