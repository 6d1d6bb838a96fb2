package memlimit

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// programResident is how much of this program's own file is in its memory
// (the Rss of its mappings of the executable), in kB.
func programResident(t *testing.T) int64 {
	t.Helper()
	var self syscall.Stat_t
	if err := syscall.Stat("/proc/self/exe", &self); err != nil {
		t.Fatal(err)
	}
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	var kb int64
	mine := false
	sc := bufio.NewScanner(bytes.NewReader(smaps))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 5 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":") {
			ino, _ := strconv.ParseUint(f[4], 10, 64)
			mine = ino == self.Ino && !strings.Contains(f[1], "w")
			continue
		}
		if mine && len(f) >= 2 && f[0] == "Rss:" {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			kb += n
		}
	}
	return kb
}

// TestPageOutProgramGivesBackItsPages: the resident pages of the program's
// read-only mappings fall when it pages itself out, and it keeps running
// (what it touches again is read back).
func TestPageOutProgramGivesBackItsPages(t *testing.T) {
	before := programResident(t)
	asked, err := pageOutProgram()
	if err == syscall.EINVAL {
		t.Skip("this kernel has no MADV_PAGEOUT (Linux 5.4 added it)")
	}
	if err != nil {
		t.Fatalf("pageOutProgram: %v", err)
	}
	after := programResident(t)
	t.Logf("the program's file: %d kB resident before, %d kB after; %d kB asked", before, after, asked/1024)
	if asked/1024 < before {
		t.Errorf("asked for %d kB, less than the %d kB resident: a mapping was missed", asked/1024, before)
	}
	if before == 0 || after > before/2 {
		t.Errorf("the program's file went from %d kB resident to %d kB; want it at least halved", before, after)
	}
}
