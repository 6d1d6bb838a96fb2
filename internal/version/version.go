// Package version is the product's version, stamped at build time by the
// Makefile (-X .../internal/version.Version=...).
package version

// Version is `git describe` of the build, or "dev".
var Version = "dev"
