package keystore

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
)

// AnnounceDefault counts the Dots whose computers run and that use the
// default key (no key of their own), and annotates each with the default
// key's Secret's new version (dotsv1.SecretsChangedAnnotation), so that the
// guest link of its host pushes the new key to the guest at once rather
// than at its next poll. StoreDefault's callers call it after the store:
// the Dots API answers the count, the CLI says it.
func AnnounceDefault(ctx context.Context, c client.Client) (int, error) {
	def := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: dotsv1.SystemNamespace, Name: dotsv1.DefaultKeySecretName}, def); err != nil {
		return 0, fmt.Errorf("read the default key's Secret: %w", err)
	}
	var computers dotsv1.ComputerList
	if err := c.List(ctx, &computers); err != nil {
		return 0, fmt.Errorf("list the Computers: %w", err)
	}
	n := 0
	for i := range computers.Items {
		comp := &computers.Items[i]
		if comp.Status.State != dotsv1.ComputerRunning {
			continue
		}
		dot := &dotsv1.Dot{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(comp), dot); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return n, fmt.Errorf("read Dot %s: %w", client.ObjectKeyFromObject(comp), err)
		}
		if !metav1.IsControlledBy(comp, dot) {
			continue
		}
		own, err := hasOwnKey(ctx, c, dot)
		if err != nil {
			return n, err
		}
		if own {
			continue
		}
		n++
		if dot.Annotations[dotsv1.SecretsChangedAnnotation] == def.ResourceVersion {
			continue
		}
		before := dot.DeepCopy()
		if dot.Annotations == nil {
			dot.Annotations = map[string]string{}
		}
		dot.Annotations[dotsv1.SecretsChangedAnnotation] = def.ResourceVersion
		// The annotation alone: any version of the Dot takes it.
		if err := c.Patch(ctx, dot, client.MergeFrom(before)); err != nil && !apierrors.IsNotFound(err) {
			return n, fmt.Errorf("annotate Dot %s with the new default key: %w", client.ObjectKeyFromObject(dot), err)
		}
	}
	return n, nil
}

// hasOwnKey says whether the Dot's own Secret (spec.secretRef) holds a key,
// which wins over the default (hostagent/guestlink reads them so).
func hasOwnKey(ctx context.Context, c client.Client, dot *dotsv1.Dot) (bool, error) {
	ref := dot.Spec.SecretRef
	if ref == nil || ref.Name == "" {
		return false, nil
	}
	sec := &corev1.Secret{}
	err := c.Get(ctx, client.ObjectKey{Namespace: dot.Namespace, Name: ref.Name}, sec)
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("read Secret %s/%s (the spec.secretRef of Dot %s): %w", dot.Namespace, ref.Name, dot.Name, err)
	}
	return len(sec.Data[dotsv1.OpenRouterKeySecretKey]) > 0, nil
}
