package postgres

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sort"
	"syscall"
)

// The kernel's binary form of a POSIX access ACL (the system.posix_acl_access
// extended attribute; linux/posix_acl_xattr.h). Written directly because the
// acl package's setfacl is not installed on a minimal host.
const (
	aclXattr      = "system.posix_acl_access"
	aclVersion    = 2
	aclUserObj    = 0x01
	aclUser       = 0x02
	aclGroupObj   = 0x04
	aclGroup      = 0x08
	aclMask       = 0x10
	aclOther      = 0x20
	aclUndefined  = 0xffffffff
	aclRead       = 4
	aclWrite      = 2
	aclExecute    = 1
	aclHeaderSize = 4
	aclEntrySize  = 8
)

type aclEntry struct {
	tag  uint16
	perm uint16
	id   uint32
}

// addACLUser adds perm for uid to path's access ACL, keeping every existing
// entry, and widens the mask so the entry takes effect.
func addACLUser(path string, uid uint32, perm uint16) error {
	entries, err := readACL(path)
	if err != nil {
		return err
	}
	found := false
	for i := range entries {
		if entries[i].tag == aclUser && entries[i].id == uid {
			entries[i].perm |= perm
			found = true
		}
	}
	if !found {
		entries = append(entries, aclEntry{tag: aclUser, perm: perm, id: uid})
	}
	// The mask bounds every named entry and the owning group: it is their union.
	var mask uint16
	hasMask := false
	for _, e := range entries {
		if e.tag == aclUser || e.tag == aclGroup || e.tag == aclGroupObj {
			mask |= e.perm
		}
	}
	for i := range entries {
		if entries[i].tag == aclMask {
			entries[i].perm = mask
			hasMask = true
		}
	}
	if !hasMask {
		entries = append(entries, aclEntry{tag: aclMask, perm: mask, id: aclUndefined})
	}
	// The kernel wants entries ordered by tag, then id.
	sort.Slice(entries, func(i, j int) bool {
		if entries[i].tag != entries[j].tag {
			return entries[i].tag < entries[j].tag
		}
		return entries[i].id < entries[j].id
	})
	buf := make([]byte, aclHeaderSize+aclEntrySize*len(entries))
	binary.LittleEndian.PutUint32(buf, aclVersion)
	for i, e := range entries {
		off := aclHeaderSize + aclEntrySize*i
		binary.LittleEndian.PutUint16(buf[off:], e.tag)
		binary.LittleEndian.PutUint16(buf[off+2:], e.perm)
		binary.LittleEndian.PutUint32(buf[off+4:], e.id)
	}
	if err := syscall.Setxattr(path, aclXattr, buf, 0); err != nil {
		return fmt.Errorf("set the access ACL of %s: %w", path, err)
	}
	return nil
}

// readACL returns path's access ACL, or the three entries its mode bits
// amount to when it has none.
func readACL(path string) ([]aclEntry, error) {
	buf := make([]byte, 1024)
	n, err := syscall.Getxattr(path, aclXattr, buf)
	if errors.Is(err, syscall.ENODATA) {
		info, err := os.Stat(path)
		if err != nil {
			return nil, err
		}
		m := uint16(info.Mode().Perm())
		return []aclEntry{
			{tag: aclUserObj, perm: m >> 6 & 7, id: aclUndefined},
			{tag: aclGroupObj, perm: m >> 3 & 7, id: aclUndefined},
			{tag: aclOther, perm: m & 7, id: aclUndefined},
		}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the access ACL of %s: %w", path, err)
	}
	buf = buf[:n]
	if len(buf) < aclHeaderSize || (len(buf)-aclHeaderSize)%aclEntrySize != 0 ||
		binary.LittleEndian.Uint32(buf) != aclVersion {
		return nil, fmt.Errorf("the access ACL of %s is in an unknown format", path)
	}
	var entries []aclEntry
	for off := aclHeaderSize; off < len(buf); off += aclEntrySize {
		entries = append(entries, aclEntry{
			tag:  binary.LittleEndian.Uint16(buf[off:]),
			perm: binary.LittleEndian.Uint16(buf[off+2:]),
			id:   binary.LittleEndian.Uint32(buf[off+4:]),
		})
	}
	return entries, nil
}
