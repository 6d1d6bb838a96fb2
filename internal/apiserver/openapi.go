package apiserver

import (
	"reflect"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	serverstorage "k8s.io/apiserver/pkg/server/storage"
	openapicommon "k8s.io/kube-openapi/pkg/common"
	openapiutil "k8s.io/kube-openapi/pkg/util"
)

// enabledIn says whether the resource configuration serves a group version:
// the version is enabled, or one of its resources is. The server is given
// no --runtime-config, so the configuration it serves is this one.
func enabledIn(c *serverstorage.ResourceConfig) func(schema.GroupVersion) bool {
	return func(gv schema.GroupVersion) bool {
		if c.GroupVersionConfigs[gv] {
			return true
		}
		for r, on := range c.ResourceConfigs {
			if on && r.GroupVersion() == gv {
				return true
			}
		}
		return false
	}
}

// servedDefinitions wraps all, the OpenAPI definitions of every Kubernetes
// type, to keep those of the API versions this server serves and what they
// refer to. The API server keeps its OpenAPI v3 configuration's definitions
// for its whole life, and Kubernetes' are about 3000 types (a node's, a
// pod's, a controller manager's configuration...) of which this generic
// control plane serves about a hundred: 15 MiB of an idle server's heap
// went to them. A type is kept when a scheme registers it in a group
// version served() enables, or under any version of a scheme of always
// (the apiextensions and aggregator servers' own), and so is every type a
// kept one depends on; apimachinery's own types (metadata, status, watch
// events, options) are kept whatever refers to them.
func servedDefinitions(all openapicommon.GetOpenAPIDefinitions, served func(schema.GroupVersion) bool, filtered *runtime.Scheme, always ...*runtime.Scheme) openapicommon.GetOpenAPIDefinitions {
	return func(ref openapicommon.ReferenceCallback) map[string]openapicommon.OpenAPIDefinition {
		defs := all(ref)
		keep := make(map[string]openapicommon.OpenAPIDefinition, 256)
		var queue []string
		add := func(name string) {
			if _, done := keep[name]; done {
				return
			}
			if d, ok := defs[name]; ok {
				keep[name] = d
				queue = append(queue, name)
			}
		}
		for name := range defs {
			if strings.HasPrefix(name, "io.k8s.apimachinery.") || strings.HasPrefix(name, "k8s.io/apimachinery/") {
				add(name)
			}
		}
		schemes := append([]*runtime.Scheme{filtered}, always...)
		for i, s := range schemes {
			for gvk, t := range s.AllKnownTypes() {
				if gvk.Version == runtime.APIVersionInternal || (i == 0 && !served(gvk.GroupVersion())) {
					continue
				}
				// The name the definitions are keyed by: the type's own
				// OpenAPI model name, else its Go path.
				add(openapiutil.GetCanonicalTypeName(reflect.New(t).Interface()))
			}
		}
		for len(queue) > 0 {
			name := queue[len(queue)-1]
			queue = queue[:len(queue)-1]
			for _, dep := range keep[name].Dependencies {
				add(dep)
			}
		}
		return keep
	}
}
