package controlplane

import (
	"context"
	"fmt"
	"io/fs"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsac "k8s.io/apiextensions-apiserver/pkg/client/applyconfiguration/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/invisible-dots/invisible-dots/config/crd"
)

// fieldManager owns the fields the server applies.
const fieldManager = "invisible-dots"

// ApplyCRDs server-side applies the embedded CRDs and waits until each is
// Established, so the controllers never start against a missing kind.
func ApplyCRDs(ctx context.Context, cfg *rest.Config) error {
	client, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return err
	}
	files, err := fs.Glob(crd.Bases, "bases/*.yaml")
	if err != nil {
		return err
	}
	var names []string
	for _, f := range files {
		data, err := crd.Bases.ReadFile(f)
		if err != nil {
			return err
		}
		var ac apiextensionsac.CustomResourceDefinitionApplyConfiguration
		if err := yaml.Unmarshal(data, &ac); err != nil {
			return fmt.Errorf("parse embedded CRD %s: %w", f, err)
		}
		if _, err := client.ApiextensionsV1().CustomResourceDefinitions().Apply(ctx, &ac, metav1.ApplyOptions{FieldManager: fieldManager, Force: true}); err != nil {
			return fmt.Errorf("apply CRD %s: %w", *ac.Name, err)
		}
		names = append(names, *ac.Name)
	}
	for _, name := range names {
		err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			got, err := client.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			for _, c := range got.Status.Conditions {
				if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return fmt.Errorf("CRD %s did not become Established: %w", name, err)
		}
	}
	return nil
}
