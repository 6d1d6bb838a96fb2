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
	case errors.Is(err, syscall.ENAMETOOLONG):
		return errorf(http.StatusBadRequest, protocol.ErrInvalidRequest, "the path (%d characters) or one of its names is too long", len(path))
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

// errLinkLoop is a path whose links do not end: the caller's mistake.
var errLinkLoop = errorf(http.StatusBadRequest, protocol.ErrInvalidRequest, "the path has too many levels of symbolic links")

// realPath follows every symbolic link of p, including a last component or
// directories that do not exist yet (what a PUT creates), and returns the
// real location. A dangling link is followed to where it points.
func realPath(p string) (string, error) {
	rest := ""
	cur := p
	for hops := 0; ; hops++ {
		if hops > 255 {
			return "", errLinkLoop
		}
		r, err := filepath.EvalSymlinks(cur)
		if err == nil {
			return filepath.Join(r, rest), nil
		}
		if strings.HasSuffix(err.Error(), "too many links") {
			// EvalSymlinks' own error for a loop of links, which it
			// declares with errors.New.
			return "", errLinkLoop
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
		// An upload may take longer than a JSON body to arrive.
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(UploadTimeout))
		body := &bodyReader{r: http.MaxBytesReader(w, r.Body, protocol.FilesMaxPutBytes)}
		if err := s.put(a, p, body); err != nil {
			var mbe *http.MaxBytesError
			switch {
			case errors.As(err, &mbe):
				writeError(w, errorf(http.StatusRequestEntityTooLarge, protocol.ErrTooLarge, "the body is over the %d-byte limit", protocol.FilesMaxPutBytes))
			case body.err != nil && errors.Is(err, body.err):
				writeError(w, errorf(http.StatusBadRequest, protocol.ErrInvalidRequest, "the body could not be read: %v", body.err))
			default:
				writeError(w, fsError(p, err))
			}
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}
}

// bodyReader remembers the error reading the request's body gave, so a
// transfer the client broke (a malformed chunk, a cut connection) is told
// from a write the file system refused.
type bodyReader struct {
	r   io.Reader
	err error
}

func (b *bodyReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		b.err = err
	}
	return n, err
}

// put writes body to p by a temporary file in the same directory and a
// rename, so a reader never sees half a file; missing parent directories are
// made. Everything that touches a name (the checks, the directories, the
// create, the rename) runs as the Dot's user, so everything it creates is
// that user's; the copy of the body, which lasts as long as the client
// wants, writes to the descriptor already opened and runs on an ordinary
// goroutine, so a slow upload never holds an OS thread.
func (s *Server) put(a fileAccess, p string, body io.Reader) error {
	c, err := asUser(s.cfg.RunAs, func() (upload, error) {
		return a.create(p)
	})
	if err != nil {
		return err
	}
	_, err = io.Copy(c.f, body)
	if cerr := c.f.Close(); err == nil {
		err = cerr
	}
	_, ferr := asUser(s.cfg.RunAs, func() (struct{}, error) {
		if err != nil {
			return struct{}{}, os.Remove(c.tmp)
		}
		if err := os.Rename(c.tmp, c.t); err != nil {
			os.Remove(c.tmp)
			return struct{}{}, err
		}
		return struct{}{}, nil
	})
	if err != nil {
		return err
	}
	return ferr
}

// upload is a file being written: the temporary file open for writing and
// the target it replaces.
type upload struct {
	f      *os.File
	tmp, t string
}

// create checks p, makes its missing parent directories and opens a new
// temporary file beside it with the mode the file will have. It runs as the
// Dot's user.
func (a fileAccess) create(p string) (upload, error) {
	t, err := a.target(p)
	if err != nil {
		return upload{}, err
	}
	mode := uint32(0o644)
	if fi, err := os.Stat(t); err == nil {
		if fi.IsDir() {
			return upload{}, errorf(http.StatusBadRequest, protocol.ErrIsDirectory, "%s is a directory", p)
		}
		if !fi.Mode().IsRegular() {
			return upload{}, errorf(http.StatusBadRequest, protocol.ErrInvalidRequest, "%s is not a regular file (%s)", p, fi.Mode().Type())
		}
		mode = uint32(fi.Mode().Perm())
		// The replace is a rename, which the directory's owner may do to any
		// file in it: ask first whether the user may write this one.
		f, err := a.open(t, unix.O_WRONLY|unix.O_NONBLOCK, 0)
		if err != nil {
			return upload{}, err
		}
		f.Close()
	}
	dir := filepath.Dir(t)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return upload{}, err
	}
	if a.confined {
		// MkdirAll follows links: check the directory again now that it exists.
		if _, err := a.target(dir); err != nil {
			return upload{}, err
		}
	}
	tmp := filepath.Join(dir, fmt.Sprintf(".%s.put-%d", filepath.Base(t), time.Now().UnixNano()))
	f, err := a.open(tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, mode)
	if err != nil {
		return upload{}, err
	}
	// The umask narrowed the create; fchmod is the owner's, so it is done
	// here, as the user.
	if err := f.Chmod(os.FileMode(mode)); err != nil {
		f.Close()
		os.Remove(tmp)
		return upload{}, err
	}
	return upload{f: f, tmp: tmp, t: t}, nil
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
			return a.listDir(f, t)
		})
		if err != nil {
			writeError(w, fsError(p, err))
			return
		}
		writeJSON(w, http.StatusOK, resp)
	}
}

// listDir lists an open directory, t. A symbolic link is listed as what it
// points to; as "other" with the link's own size and time when that cannot
// be read or, for a confined listing, lies outside home: nothing of a target
// outside home is ever stat'ed.
func (a fileAccess) listDir(dir *os.File, t string) (protocol.ListResponse, error) {
	names, err := dir.Readdirnames(-1)
	if err != nil {
		return protocol.ListResponse{}, err
	}
	sort.Strings(names)
	out := protocol.ListResponse{Entries: make([]protocol.ListEntry, 0, len(names))}
	for _, name := range names {
		e := protocol.ListEntry{Name: name, Type: protocol.EntryOther}
		var st unix.Stat_t
		if err := unix.Fstatat(int(dir.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			out.Entries = append(out.Entries, e)
			continue
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			if target, ok := a.followLink(dir, filepath.Join(t, name)); ok {
				st = target
			}
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			e.Type = protocol.EntryFile
		case unix.S_IFDIR:
			e.Type = protocol.EntryDir
		}
		e.Size = st.Size
		e.Mtime = time.Unix(st.Mtim.Sec, st.Mtim.Nsec).UTC().Format(time.RFC3339)
		out.Entries = append(out.Entries, e)
	}
	return out, nil
}

// followLink stats what the link at path points to: for a confined listing
// only when it resolves inside home, and then through a descriptor opened
// with no symbolic link on the way, so a link swapped meanwhile is not
// followed out.
func (a fileAccess) followLink(dir *os.File, path string) (unix.Stat_t, bool) {
	var st unix.Stat_t
	if !a.confined {
		err := unix.Fstatat(int(dir.Fd()), filepath.Base(path), &st, 0)
		return st, err == nil
	}
	real, err := a.target(path)
	if err != nil {
		return st, false
	}
	f, err := a.open(real, unix.O_PATH, 0)
	if err != nil {
		return st, false
	}
	defer f.Close()
	return st, unix.Fstat(int(f.Fd()), &st) == nil
}
