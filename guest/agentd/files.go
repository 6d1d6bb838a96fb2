package agentd

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// apiError is an answer that is not a success: status, code, message.
type apiError struct {
	status int
	code   string
	msg    string
}

func (e *apiError) Error() string { return e.code + ": " + e.msg }

func errorf(status int, code, format string, args ...any) *apiError {
	return &apiError{status: status, code: code, msg: fmt.Sprintf(format, args...)}
}

// fsError turns a file-system error into the answer the routes give: a path
// dot may not open is 403 permission_denied, a missing one 404, and a
// symbolic link met where resolution said there was none (it was swapped in
// meanwhile) is 403 outside_home.
func fsError(path string, err error) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	switch {
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.EPERM):
		return errorf(http.StatusForbidden, protocol.ErrPermissionDenied, "%s: permission denied", path)
	case errors.Is(err, fs.ErrNotExist):
		return errorf(http.StatusNotFound, protocol.ErrNotFound, "%s: no such file or directory", path)
	case errors.Is(err, syscall.ELOOP), errors.Is(err, syscall.EXDEV):
		return errorf(http.StatusForbidden, protocol.ErrOutsideHome, "%s: a symbolic link changed while it was opened", path)
	case errors.Is(err, syscall.EISDIR):
		return errorf(http.StatusBadRequest, protocol.ErrIsDirectory, "%s is a directory", path)
	case errors.Is(err, syscall.ENOTDIR):
		return errorf(http.StatusBadRequest, protocol.ErrNotDirectory, "%s: a component is not a directory", path)
	}
	return errorf(http.StatusInternalServerError, protocol.ErrInternal, "%s: %v", path, err)
}

// fileAccess is how one listener's file routes reach paths: confined to the
// Dot's home (TCP, the host's door) or not (the engine's socket).
type fileAccess struct {
	home     string
	confined bool
}

// target is a path made absolute and, when confined, resolved with every
// symbolic link followed and checked to lie under home.
func (a fileAccess) target(p string) (string, error) {
	if p == "" {
		return "", errorf(http.StatusBadRequest, protocol.ErrInvalidRequest, "the path query parameter is required")
	}
	if strings.ContainsRune(p, 0) {
		return "", errorf(http.StatusBadRequest, protocol.ErrInvalidRequest, "the path holds a NUL byte")
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(a.home, p)
	}
	p = filepath.Clean(p)
	if !a.confined {
		return p, nil
	}
	home, err := realPath(a.home)
	if err != nil {
		return "", fsError(a.home, err)
	}
	real, err := realPath(p)
	if err != nil {
		return "", fsError(p, err)
	}
	if real != home && !strings.HasPrefix(real, home+string(filepath.Separator)) {
		return "", errorf(http.StatusForbidden, protocol.ErrOutsideHome, "%s resolves outside the Dot's home %s", p, a.home)
	}
	return real, nil
}

// realPath follows every symbolic link of p, including a last component or
// directories that do not exist yet (what a PUT creates), and returns the
// real location. A dangling link is followed to where it points.
func realPath(p string) (string, error) {
	rest := ""
	cur := p
	for hops := 0; ; hops++ {
		if hops > 255 {
			return "", syscall.ELOOP
		}
		r, err := filepath.EvalSymlinks(cur)
		if err == nil {
			return filepath.Join(r, rest), nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		if fi, lerr := os.Lstat(cur); lerr == nil && fi.Mode()&fs.ModeSymlink != 0 {
			link, rerr := os.Readlink(cur)
			if rerr != nil {
				return "", rerr
			}
			if !filepath.IsAbs(link) {
				link = filepath.Join(filepath.Dir(cur), link)
			}
			cur = filepath.Clean(link)
			continue
		}
		if cur == "/" || cur == "." {
			return "", err
		}
		rest = filepath.Join(filepath.Base(cur), rest)
		cur = filepath.Dir(cur)
	}
}

// open opens a target. A confined target was resolved already, so opening
// it refuses any symbolic link on the way: one found now was swapped in after
// the check.
func (a fileAccess) open(path string, flags int, mode uint32) (*os.File, error) {
	flags |= unix.O_CLOEXEC
	if !a.confined {
		return os.OpenFile(path, flags, os.FileMode(mode))
	}
	fd, err := unix.Openat2(unix.AT_FDCWD, path, &unix.OpenHow{Flags: uint64(flags), Mode: uint64(mode), Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS})
	if errors.Is(err, unix.ENOSYS) {
		fd, err = unix.Open(path, flags|unix.O_NOFOLLOW, mode)
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

func (s *Server) handleFileGet(a fileAccess) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Query().Get(protocol.QueryPath)
		f, err := asUser(s.cfg.RunAs, func() (*os.File, error) {
			t, err := a.target(p)
			if err != nil {
				return nil, err
			}
			// O_NONBLOCK: a FIFO the user made must not hold the request.
			return a.open(t, unix.O_RDONLY|unix.O_NONBLOCK, 0)
		})
		if err != nil {
			writeError(w, fsError(p, err))
			return
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			writeError(w, fsError(p, err))
			return
		}
		if fi.IsDir() {
			writeError(w, errorf(http.StatusBadRequest, protocol.ErrIsDirectory, "%s is a directory: list it with %s", p, protocol.PathFilesList))
			return
		}
		if !fi.Mode().IsRegular() {
			writeError(w, errorf(http.StatusBadRequest, protocol.ErrInvalidRequest, "%s is not a regular file (%s)", p, fi.Mode().Type()))
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", fmt.Sprint(fi.Size()))
		w.WriteHeader(http.StatusOK)
		if _, err := io.Copy(w, f); err != nil {
			s.log().Warn("file read cut short", "path", p, "err", err)
		}
	}
}

func (s *Server) handleFilePut(a fileAccess) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Query().Get(protocol.QueryPath)
		if r.ContentLength > protocol.FilesMaxPutBytes {
			writeError(w, errorf(http.StatusRequestEntityTooLarge, protocol.ErrTooLarge, "the body of %d bytes is over the %d-byte limit", r.ContentLength, protocol.FilesMaxPutBytes))
			return
		}
		body := http.MaxBytesReader(w, r.Body, protocol.FilesMaxPutBytes)
		_, err := asUser(s.cfg.RunAs, func() (struct{}, error) {
			return struct{}{}, a.put(p, body)
		})
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				writeError(w, errorf(http.StatusRequestEntityTooLarge, protocol.ErrTooLarge, "the body is over the %d-byte limit", protocol.FilesMaxPutBytes))
				return
			}
			writeError(w, fsError(p, err))
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}
}

// put writes body to p by a temporary file in the same directory and a
// rename, so a reader never sees half a file; missing parent directories are
// made. It runs as the Dot's user, so everything it creates is that user's.
func (a fileAccess) put(p string, body io.Reader) error {
	t, err := a.target(p)
	if err != nil {
		return err
	}
	mode := uint32(0o644)
	if fi, err := os.Stat(t); err == nil {
		if fi.IsDir() {
			return errorf(http.StatusBadRequest, protocol.ErrIsDirectory, "%s is a directory", p)
		}
		if !fi.Mode().IsRegular() {
			return errorf(http.StatusBadRequest, protocol.ErrInvalidRequest, "%s is not a regular file (%s)", p, fi.Mode().Type())
		}
		mode = uint32(fi.Mode().Perm())
		// The replace is a rename, which the directory's owner may do to any
		// file in it: ask first whether the user may write this one.
		f, err := a.open(t, unix.O_WRONLY|unix.O_NONBLOCK, 0)
		if err != nil {
			return err
		}
		f.Close()
	}
	dir := filepath.Dir(t)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if a.confined {
		// MkdirAll follows links: check the directory again now that it exists.
		if _, err := a.target(dir); err != nil {
			return err
		}
	}
	tmp := filepath.Join(dir, fmt.Sprintf(".%s.put-%d", filepath.Base(t), time.Now().UnixNano()))
	f, err := a.open(tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, mode)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, body)
	if err == nil {
		err = f.Chmod(os.FileMode(mode)) // the umask narrowed the create
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, t)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

func (s *Server) handleFileList(a fileAccess) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Query().Get(protocol.QueryPath)
		if p == "" {
			p = a.home
		}
		resp, err := asUser(s.cfg.RunAs, func() (protocol.ListResponse, error) {
			t, err := a.target(p)
			if err != nil {
				return protocol.ListResponse{}, err
			}
			f, err := a.open(t, unix.O_RDONLY|unix.O_DIRECTORY, 0)
			if err != nil {
				if errors.Is(err, syscall.ENOTDIR) {
					return protocol.ListResponse{}, errorf(http.StatusBadRequest, protocol.ErrNotDirectory, "%s is not a directory", p)
				}
				return protocol.ListResponse{}, err
			}
			defer f.Close()
			return listDir(f)
		})
		if err != nil {
			writeError(w, fsError(p, err))
			return
		}
		writeJSON(w, http.StatusOK, resp)
	}
}

// listDir lists an open directory. A symbolic link is listed as what it
// points to, or "other" when that cannot be read.
func listDir(dir *os.File) (protocol.ListResponse, error) {
	names, err := dir.Readdirnames(-1)
	if err != nil {
		return protocol.ListResponse{}, err
	}
	sort.Strings(names)
	out := protocol.ListResponse{Entries: make([]protocol.ListEntry, 0, len(names))}
	for _, name := range names {
		var st unix.Stat_t
		e := protocol.ListEntry{Name: name, Type: protocol.EntryOther}
		err := unix.Fstatat(int(dir.Fd()), name, &st, 0)
		if err != nil {
			err = unix.Fstatat(int(dir.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW)
		} else {
			switch st.Mode & unix.S_IFMT {
			case unix.S_IFREG:
				e.Type = protocol.EntryFile
			case unix.S_IFDIR:
				e.Type = protocol.EntryDir
			}
		}
		if err == nil {
			e.Size = st.Size
			e.Mtime = time.Unix(st.Mtim.Sec, st.Mtim.Nsec).UTC().Format(time.RFC3339)
		}
		out.Entries = append(out.Entries, e)
	}
	return out, nil
}
