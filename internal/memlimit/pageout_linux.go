package memlimit

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// pageOutProgram asks the kernel to take back the pages of this program's
// own file that are in memory (madvise MADV_PAGEOUT on each read-only
// mapping of the executable). The binary is about 180 MB: a start runs and
// reads about 100 MB of it (every package's init, the API server's build,
// the first lists), and an idle server uses about half of that again, which
// comes back as it runs (measured: 98 MB of it resident after a start,
// 38 MB 5 s after a page-out, 49 MB 40 s after, and flat then). The pages
// stay the file's: nothing is lost, a page the server needs again is read
// back (from the page cache when the kernel still has it there). It
// returns the bytes it asked for; an error when the kernel refused (before
// Linux 5.4 MADV_PAGEOUT does not exist: then nothing changes).
func pageOutProgram() (int64, error) {
	var self syscall.Stat_t
	if err := syscall.Stat("/proc/self/exe", &self); err != nil {
		return 0, err
	}
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return 0, err
	}
	var asked int64
	sc := bufio.NewScanner(bytes.NewReader(maps))
	for sc.Scan() {
		// start-end perms offset dev inode path
		f := bytes.Fields(sc.Bytes())
		if len(f) < 6 || bytes.IndexByte(f[1], 'w') >= 0 {
			continue // a writable mapping is the program's data, not its file
		}
		if ino, err := strconv.ParseUint(string(f[4]), 10, 64); err != nil || ino != self.Ino {
			continue
		}
		start, end, ok := bytes.Cut(f[0], []byte("-"))
		if !ok {
			continue
		}
		from, err1 := strconv.ParseUint(string(start), 16, 64)
		to, err2 := strconv.ParseUint(string(end), 16, 64)
		if err1 != nil || err2 != nil || to <= from {
			continue
		}
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, uintptr(from), uintptr(to-from), unix.MADV_PAGEOUT); errno != 0 {
			return asked, errno
		}
		asked += int64(to - from)
	}
	return asked, nil
}
