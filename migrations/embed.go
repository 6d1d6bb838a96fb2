// Package migrations embeds the SQL files that make the control plane's
// tables (DESIGN.md 4), applied in order at start by internal/postgres/migrate.
// A released file never changes: a schema change is a new file.
package migrations

import "embed"

// FS holds every NNNN_words.sql file of this directory.
//
//go:embed *.sql
var FS embed.FS
