package postgres

import (
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestAddACLUser(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	const uid = 54321
	if err := addACLUser(dir, uid, aclExecute); err != nil {
		t.Skipf("no ACL support here: %v", err)
	}
	// Granting more later merges into the one entry.
	if err := addACLUser(dir, uid, aclRead|aclWrite); err != nil {
		t.Fatal(err)
	}
	got, err := readACL(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []aclEntry{
		{tag: aclUserObj, perm: 7, id: aclUndefined},
		{tag: aclUser, perm: 7, id: uid},
		{tag: aclGroupObj, perm: 5, id: aclUndefined},
		{tag: aclMask, perm: 7, id: aclUndefined},
		{tag: aclOther, perm: 0, id: aclUndefined},
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(aclEntry{})); diff != "" {
		t.Errorf("ACL of a 0750 directory after granting uid %d rwx (-want +got):\n%s", uid, diff)
	}
	info, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	// With an ACL the group bits show the mask; other stays closed.
	if got := info.Mode().Perm(); got != 0o770 {
		t.Errorf("mode after the grant = %o, want 770", got)
	}
}
