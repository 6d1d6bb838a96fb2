package controlplane

import (
	"context"
	"fmt"
	"io/fs"
	"time"

	apiextensionshelpers "k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsac "k8s.io/apiextensions-apiserver/pkg/client/applyconfiguration/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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
	crds := client.ApiextensionsV1().CustomResourceDefinitions()
	for _, name := range names {
		var installing time.Time // since when its names are accepted and it is not Established
		err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			got, err := crds.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			switch {
			case apiextensionshelpers.IsCRDConditionTrue(got, apiextensionsv1.Established):
				return true, nil
			case !apiextensionshelpers.IsCRDConditionTrue(got, apiextensionsv1.NamesAccepted):
				installing = time.Time{}
			case installing.IsZero():
				installing = time.Now()
			case time.Since(installing) >= stuckInstalling:
				// A conflict or a refusal is tried again at the next look.
				_, _ = crds.Patch(ctx, name, types.MergePatchType, establishNudge(time.Now()), metav1.PatchOptions{FieldManager: fieldManager})
				installing = time.Now()
			}
			return false, nil
		})
		if err != nil {
			return fmt.Errorf("CRD %s did not become Established: %w", name, err)
		}
	}
	return nil
}

// A CRD is made Established by upstream's establishing controller, which
// is handed it when an update shows its names accepted and it not yet
// Established (the CRD handler's update event). On a home whose starts were
// killed while they installed the CRDs, one CRD was found left so: names
// accepted, Established False "Installing". Nothing updated it: each later
// start's apply changed nothing, and the start waited 30 s here and gave
// up, at every start. So a CRD whose names are accepted and which is not
// Established after stuckInstalling (longer than the 5 s an API server of
// several waits before it establishes one) is updated: an annotation saying
// when, which hands it to that controller.
const (
	stuckInstalling     = 10 * time.Second
	establishAnnotation = "dots.invisible.dev/establish-requested"
)

// establishNudge is the merge patch of that update.
func establishNudge(at time.Time) []byte {
	return fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, establishAnnotation, at.UTC().Format(time.RFC3339Nano))
}
