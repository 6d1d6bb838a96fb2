//go:build tools

// Package hack pins the versions of the build tools and heavy dependencies the
// Makefile runs, so that `go mod tidy` keeps them.
package hack
