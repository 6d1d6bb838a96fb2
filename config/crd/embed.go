// Package crd embeds the generated CustomResourceDefinitions (bases/, written
// by `make manifests`) so the server applies exactly what is checked in.
package crd

import "embed"

// Bases holds bases/*.yaml.
//
//go:embed bases/*.yaml
var Bases embed.FS
