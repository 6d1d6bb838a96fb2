// Package pgtest starts one throwaway managed PostgreSQL, with the control
// plane's schema, for the tests of a package that reads and writes the
// control plane's tables.
package pgtest

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/invisible-dots/invisible-dots/internal/postgres"
)

// Run starts the database in a fresh home, hands it to use, runs the
// package's tests and stops the database; it returns the exit code for
// os.Exit. Call it from TestMain. Tests share the database, so each keeps to
// its own rows (a Dot UID of its own).
func Run(m *testing.M, use func(*postgres.Instance)) int {
	home, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(home)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	inst, err := postgres.Start(ctx, postgres.Options{Home: home})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start the test database:", err)
		return 1
	}
	defer inst.Stop(context.Background())
	use(inst)
	return m.Run()
}
