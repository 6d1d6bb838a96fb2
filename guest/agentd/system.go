package agentd

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"net/http/httputil"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

func uptimeSeconds() (int64, error) {
	b, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, fmt.Errorf("/proc/uptime is empty")
	}
	v, err := strconv.ParseFloat(f[0], 64)
	return int64(v), err
}

// memInfo returns MemTotal and MemAvailable in bytes.
func memInfo() (total, avail uint64, err error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 2 {
			continue
		}
		n, _ := strconv.ParseUint(fields[1], 10, 64)
		switch fields[0] {
		case "MemTotal:":
			total = n * 1024
		case "MemAvailable:":
			avail = n * 1024
		}
	}
	return total, avail, s.Err()
}

func (s *Server) handleSystem(w http.ResponseWriter, r *http.Request) {
	var resp protocol.SystemResponse
	resp.Hostname, _ = os.Hostname()
	resp.UptimeS, _ = uptimeSeconds()
	resp.CPUs = runtime.NumCPU()
	resp.MemTotalBytes, resp.MemAvailableBytes, _ = memInfo()
	var st unix.Statfs_t
	if err := unix.Statfs(s.cfg.Home, &st); err == nil {
		resp.DiskTotalBytes = st.Blocks * uint64(st.Bsize)
		resp.DiskFreeBytes = st.Bavail * uint64(st.Bsize)
	}
	writeJSON(w, http.StatusOK, resp)
}

// handlePoweroff starts the poweroff command detached, as the daemon itself
// (the seed's sudoers rule is dotagentd's, not dot's), and answers before it
// takes the guest down.
func (s *Server) handlePoweroff(w http.ResponseWriter, r *http.Request) {
	argv := s.cfg.PoweroffArgv
	if len(argv) == 0 {
		writeError(w, errorf(http.StatusInternalServerError, protocol.ErrPoweroffFailed, "no poweroff command is configured"))
		return
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := startClean(cmd); err != nil {
		s.log().Error("poweroff could not be started", "command", argv[0], "err", err)
		writeError(w, errorf(http.StatusInternalServerError, protocol.ErrPoweroffFailed, "start %s: %v", argv[0], err))
		return
	}
	s.log().Info("poweroff started", "command", strings.Join(argv, " "), "pid", cmd.Process.Pid)
	go func() {
		if err := cmd.Wait(); err != nil {
			s.log().Error("poweroff command failed", "err", err)
		}
	}()
	writeJSON(w, http.StatusAccepted, protocol.PoweroffResponse{Status: protocol.PoweroffStatus})
}

// displaySocket is the X socket of the configured display (":0" -> X0).
func (s *Server) displaySocket() string {
	d := strings.TrimPrefix(s.cfg.Display, ":")
	d, _, _ = strings.Cut(d, ".")
	return filepath.Join(s.cfg.X11SocketDir, "X"+d)
}

// handleScreenshot captures the display as the Dot's user with the
// configured program (ImageMagick's import in the golden image). A computer
// without a display, such as the test image, answers 503 no_display.
func (s *Server) handleScreenshot(w http.ResponseWriter, r *http.Request) {
	if _, err := os.Stat(s.displaySocket()); err != nil {
		writeError(w, errorf(http.StatusServiceUnavailable, protocol.ErrNoDisplay, "display %s is not running on this computer (no %s)", s.cfg.Display, s.displaySocket()))
		return
	}
	argv := s.cfg.ScreenshotArgv
	if len(argv) == 0 {
		writeError(w, errorf(http.StatusInternalServerError, protocol.ErrScreenshotFailed, "no screenshot program is configured"))
		return
	}
	ctx, cancel := contextWithTimeout(r, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = s.env(nil)
	cmd.Dir = s.cfg.Home
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cfg.RunAs.credential(), Setpgid: true}
	var out, errOut cappedBuffer
	out.limit, errOut.limit = 64<<20, 4096
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := startClean(cmd)
	if err == nil {
		err = cmd.Wait()
	}
	if err != nil || !bytes.HasPrefix(out.Bytes(), []byte("\x89PNG")) {
		writeError(w, errorf(http.StatusInternalServerError, protocol.ErrScreenshotFailed, "%s did not write a PNG (%v): %s", argv[0], err, strings.TrimSpace(errOut.String())))
		return
	}
	w.Header().Set("Content-Type", "image/png")
	w.Header().Set("Content-Length", strconv.Itoa(out.Len()))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(out.Bytes())
}

// agentProxy forwards /v1/agent/<rest> to the engine's socket as /<rest>.
// The host's token stops here: the engine never sees it.
func (s *Server) agentProxy() http.Handler {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = "agent"
			pr.Out.Host = "agent"
			pr.Out.URL.Path = "/" + strings.TrimPrefix(pr.In.URL.Path, protocol.PathAgentPrefix)
			pr.Out.URL.RawPath = ""
			pr.Out.Header.Del("Authorization")
		},
		Transport:     s.agentTransport(),
		FlushInterval: -1, // the event stream is read as it comes
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			s.log().Warn("engine did not answer", "path", r.URL.Path, "err", err)
			writeError(w, errorf(http.StatusBadGateway, protocol.ErrAgentUnavailable, "the engine's socket did not answer: %v", err))
		},
	}
}
