package agentd

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// threads is the number of OS threads of this process.
func threads(t *testing.T) int {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Threads:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	t.Fatal("no Threads line")
	return 0
}

func TestSlowUploadsHoldNoThread(t *testing.T) {
	r, _ := asNobody(t)
	const uploads = 60
	before := threads(t)
	addr := strings.TrimPrefix(r.tcp.URL, "http://")
	for i := range uploads {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "PUT %s?path=slow-%d HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: 1000\r\n\r\nfirst bytes", protocol.PathFiles, i, testToken)
	}
	time.Sleep(2 * time.Second)
	if grew := threads(t) - before; grew > uploads/3 {
		t.Errorf("%d uploads in progress hold %d more OS threads: the body must be copied outside the user-switched thread", uploads, grew)
	}
	// The uploads still land, and as the Dot's user.
	c, _ := net.Dial("tcp", addr)
	defer c.Close()
	fmt.Fprintf(c, "PUT %s?path=whole HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: 5\r\n\r\nhello", protocol.PathFiles, testToken)
	buf := make([]byte, 64)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, _ := c.Read(buf)
	if !bytes.Contains(buf[:n], []byte("204")) {
		t.Fatalf("a whole upload = %q", buf[:n])
	}
	fi, err := os.Stat(r.home + "/whole")
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != 65534 {
		t.Errorf("the uploaded file belongs to uid %d, want nobody's", st.Uid)
	}
}
