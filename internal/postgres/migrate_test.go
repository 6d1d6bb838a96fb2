package postgres

import (
	"context"
	"strings"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"github.com/invisible-dots/invisible-dots/internal/postgres/migrate"
	"github.com/invisible-dots/invisible-dots/migrations"
)

func connect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// files builds a migrations directory; each file appends its name to trail,
// so the order they ran in is visible.
func files(names ...string) fstest.MapFS {
	fsys := fstest.MapFS{}
	for _, n := range names {
		sql := "INSERT INTO trail (name) VALUES ('" + n + "');"
		if strings.HasPrefix(n, "0001") {
			sql = "CREATE TABLE trail (n serial PRIMARY KEY, name text);\n" + sql
		}
		fsys[n] = &fstest.MapFile{Data: []byte(sql)}
	}
	return fsys
}

func trail(t *testing.T, conn *pgx.Conn) []string {
	t.Helper()
	rows, err := conn.Query(context.Background(), "SELECT name FROM trail ORDER BY n")
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return names
}

func TestMigrateOnceInOrder(t *testing.T) {
	ctx := context.Background()
	conn := connect(t, newDatabase(t))
	// Listed out of order on purpose: names fix the order, 10 sorts after 9.
	fsys := files("0010_last.sql", "0001_first.sql", "0009_middle.sql")
	got, err := migrate.Apply(ctx, conn, fsys)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"0001_first.sql", "0009_middle.sql", "0010_last.sql"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("first run applied (-want +got):\n%s", diff)
	}
	got, err = migrate.Apply(ctx, conn, fsys)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Errorf("second run applied %v, want nothing", got)
	}
	if diff := cmp.Diff(want, trail(t, conn)); diff != "" {
		t.Errorf("files ran (-want +got):\n%s", diff)
	}
}

func TestMigrateFailureRollsBackOnlyItself(t *testing.T) {
	ctx := context.Background()
	conn := connect(t, newDatabase(t))
	fsys := files("0001_ok.sql", "0003_after.sql")
	fsys["0002_broken.sql"] = &fstest.MapFile{Data: []byte(
		"INSERT INTO trail (name) VALUES ('0002_broken.sql');\nCREATE TABLE half (a int);\nSELECT 1/0;\n")}

	got, err := migrate.Apply(ctx, conn, fsys)
	if err == nil {
		t.Fatal("a failing migration did not fail the run")
	}
	for _, want := range []string{"0002_broken.sql", "division by zero"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if diff := cmp.Diff([]string{"0001_ok.sql"}, got); diff != "" {
		t.Errorf("applied before the failure (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"0001_ok.sql"}, trail(t, conn)); diff != "" {
		t.Errorf("rows left (-want +got):\n%s", diff)
	}
	var half bool
	if err := conn.QueryRow(ctx, "SELECT to_regclass('half') IS NOT NULL").Scan(&half); err != nil || half {
		t.Errorf("the failed file's table exists (%v, %v); its transaction was not rolled back", half, err)
	}

	fsys["0002_broken.sql"] = &fstest.MapFile{Data: []byte("INSERT INTO trail (name) VALUES ('0002_fixed');")}
	if got, err = migrate.Apply(ctx, conn, fsys); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"0002_broken.sql", "0003_after.sql"}, got); diff != "" {
		t.Errorf("after the fix (-want +got):\n%s", diff)
	}
}

func TestMigrateErrorNamesLine(t *testing.T) {
	conn := connect(t, newDatabase(t))
	fsys := fstest.MapFS{"0001_typo.sql": {Data: []byte("CREATE TABLE a (n int);\n\nCREATE TABLEE b (n int);\n")}}
	_, err := migrate.Apply(context.Background(), conn, fsys)
	if err == nil || !strings.Contains(err.Error(), "0001_typo.sql") || !strings.Contains(err.Error(), "line 3") {
		t.Errorf("got %v, want an error naming 0001_typo.sql and line 3", err)
	}
}

func TestMigrateRefusals(t *testing.T) {
	tests := map[string]struct {
		reason string
		later  fstest.MapFS
		want   string
	}{
		"changed": {
			reason: "a released file must never change",
			later:  fstest.MapFS{"0001_first.sql": {Data: []byte("CREATE TABLE trail (n int); -- edited")}},
			want:   "applied with other contents",
		},
		"unknown": {
			reason: "a database migrated by a newer binary is not ours to run on",
			later:  fstest.MapFS{},
			want:   "does not know",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			conn := connect(t, newDatabase(t))
			if _, err := migrate.Apply(context.Background(), conn, files("0001_first.sql")); err != nil {
				t.Fatal(err)
			}
			_, err := migrate.Apply(context.Background(), conn, tc.later)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: got %v, want an error saying %q", tc.reason, err, tc.want)
			}
		})
	}
}

func TestMigrateNames(t *testing.T) {
	tests := map[string]struct {
		fsys fstest.MapFS
		want string
	}{
		"no number":   {fsys: fstest.MapFS{"events.sql": {}}, want: "not named"},
		"same number": {fsys: fstest.MapFS{"0001_a.sql": {}, "0001_b.sql": {}}, want: "same number"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if _, err := migrate.Load(tc.fsys); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Load: got %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

func TestMigrateConcurrently(t *testing.T) {
	dsn := newDatabase(t)
	fsys := files("0001_a.sql", "0002_b.sql", "0003_c.sql", "0004_d.sql")
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range errs {
		conn := connect(t, dsn)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = migrate.Apply(context.Background(), conn, fsys)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"0001_a.sql", "0002_b.sql", "0003_c.sql", "0004_d.sql"}
	if diff := cmp.Diff(want, trail(t, connect(t, dsn))); diff != "" {
		t.Errorf("three servers migrating at once ran (-want +got):\n%s", diff)
	}
}

func TestEmbeddedMigrationsLoad(t *testing.T) {
	ms, err := migrate.Load(migrations.FS)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) == 0 || ms[0].Name != "0001_event_log.sql" {
		t.Errorf("embedded migrations = %v, want 0001_event_log.sql first", ms)
	}
}
