package crd_test

import (
	"context"
	"io/fs"
	"testing"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	"sigs.k8s.io/yaml"

	"github.com/invisible-dots/invisible-dots/config/crd"
)

// TestCRDsPassAPIServerValidation runs the API server's own CRD validation
// (structural schema, CEL compilation and its cost budget) on every generated
// CRD, so a marker the server would refuse fails here, not at server start.
func TestCRDsPassAPIServerValidation(t *testing.T) {
	files, err := fs.Glob(crd.Bases, "bases/*.yaml")
	if err != nil || len(files) != 8 {
		t.Fatalf("want 8 CRDs in bases/, got %v (%v)", files, err)
	}
	for _, f := range files {
		t.Run(f, func(t *testing.T) {
			data, err := crd.Bases.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var v1crd apiextensionsv1.CustomResourceDefinition
			if err := yaml.UnmarshalStrict(data, &v1crd); err != nil {
				t.Fatal(err)
			}
			apiextensionsv1.SetObjectDefaults_CustomResourceDefinition(&v1crd)
			var internal apiextensions.CustomResourceDefinition
			if err := apiextensionsv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(&v1crd, &internal, nil); err != nil {
				t.Fatal(err)
			}
			if errs := validation.ValidateCustomResourceDefinition(context.Background(), &internal); len(errs) > 0 {
				for _, e := range errs {
					t.Error(e)
				}
			}
		})
	}
}
