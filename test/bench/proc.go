package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// memory is the resident memory of a set of processes. RSS counts a page
// shared by several of them once per process (postgres's shared buffers are
// in every backend); PSS divides each shared page among its sharers, so the
// PSS of a set adds up to what the set really holds.
type memory struct {
	RSS, PSS  int64 // bytes
	Processes int
}

func (m *memory) add(o memory) {
	m.RSS += o.RSS
	m.PSS += o.PSS
	m.Processes += o.Processes
}

// processMemory reads VmRSS from /proc/pid/status and Pss from
// /proc/pid/smaps_rollup.
func processMemory(pid int) (memory, error) {
	dir := filepath.Join("/proc", strconv.Itoa(pid))
	status, err := os.ReadFile(filepath.Join(dir, "status"))
	if err != nil {
		return memory{}, fmt.Errorf("read the status of process %d: %w", pid, err)
	}
	rss, err := kBField(status, "VmRSS:")
	if err != nil {
		return memory{}, fmt.Errorf("process %d: %w", pid, err)
	}
	rollup, err := os.ReadFile(filepath.Join(dir, "smaps_rollup"))
	if err != nil {
		return memory{}, fmt.Errorf("read the memory map summary of process %d: %w", pid, err)
	}
	pss, err := kBField(rollup, "Pss:")
	if err != nil {
		return memory{}, fmt.Errorf("process %d: %w", pid, err)
	}
	return memory{RSS: rss, PSS: pss, Processes: 1}, nil
}

// kBField returns the value of a "Name:   1234 kB" line of a /proc file in
// bytes.
func kBField(data []byte, name string) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), name)
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("field %s is %q, not a number of kB", name, rest)
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("field %s is %q, not a number of kB", name, rest)
		}
		return n * 1024, nil
	}
	return 0, fmt.Errorf("no %s field", name)
}

// treeMemory is the memory of pid itself and, apart, of all its descendants
// (the managed postgres and its backends), with the descendants' command
// names.
func treeMemory(pid int) (self, children memory, names map[string]int, err error) {
	self, err = processMemory(pid)
	if err != nil {
		return memory{}, memory{}, nil, err
	}
	kids, err := descendants(pid)
	if err != nil {
		return memory{}, memory{}, nil, err
	}
	names = map[string]int{}
	for _, k := range kids {
		m, err := processMemory(k.pid)
		if err != nil {
			continue // it exited between the scan and the read
		}
		children.add(m)
		names[k.comm]++
	}
	return self, children, names, nil
}

type proc struct {
	pid, ppid int
	comm      string
}

// descendants lists every process below pid, found through the parent pids in
// /proc/*/stat.
func descendants(pid int) ([]proc, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("list /proc: %w", err)
	}
	byParent := map[int][]proc{}
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		p, err := parseStat(n, b)
		if err != nil {
			continue
		}
		byParent[p.ppid] = append(byParent[p.ppid], p)
	}
	var out []proc
	queue := []int{pid}
	for len(queue) > 0 {
		next := queue[0]
		queue = queue[1:]
		for _, c := range byParent[next] {
			out = append(out, c)
			queue = append(queue, c.pid)
		}
	}
	return out, nil
}

// parseStat reads the command name and parent pid of a /proc/pid/stat line.
// The name is in parentheses and may itself hold spaces or parentheses, so
// the fields after it are found from the last ')'.
func parseStat(pid int, b []byte) (proc, error) {
	s := string(b)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return proc{}, fmt.Errorf("stat of %d has no command name", pid)
	}
	f := strings.Fields(s[end+1:])
	if len(f) < 2 {
		return proc{}, fmt.Errorf("stat of %d is short", pid)
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return proc{}, fmt.Errorf("stat of %d has parent %q", pid, f[1])
	}
	return proc{pid: pid, ppid: ppid, comm: s[open+1 : end]}, nil
}

// child is a process the bench runs, its output appended to a log file.
type child struct {
	cmd     *exec.Cmd
	started time.Time     // just before exec
	exited  chan struct{} // closed once the process has been waited for
	waitErr error         // how it ended, once exited is closed
}

// startChild starts cmd with its output appended to logFile (closed when
// the process ends). A benchmark killed by go test's timeout must not leave
// it running: sig reaches it when the bench dies. The signal follows the
// thread that forked, so that thread stays for the child's life.
func startChild(cmd *exec.Cmd, logFile *os.File, sig syscall.Signal) (*child, error) {
	c := &child{cmd: cmd, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: sig}
	startErr := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		c.started = time.Now()
		if err := cmd.Start(); err != nil {
			startErr <- err
			return
		}
		startErr <- nil
		c.waitErr = cmd.Wait()
		logFile.Close()
		close(c.exited)
	}()
	if err := <-startErr; err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	return c, nil
}

func (c *child) pid() int { return c.cmd.Process.Pid }
