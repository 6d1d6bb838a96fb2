package door

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

func TestLimitMakesRoomButKeepsTheAuthenticated(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := Limit(raw, 4)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "yes" {
			Trust(r.Context())
		}
		io.WriteString(w, "ok")
	})}
	ln.Configure(srv)
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	addr := raw.Addr().String()

	// The host's connection: authenticated once, then idle.
	host, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	br := bufio.NewReader(host)
	ask := func() error {
		fmt.Fprintf(host, "GET / HTTP/1.1\r\nHost: x\r\nAuthorization: yes\r\n\r\n")
		host.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := ask(); err != nil {
		t.Fatal(err)
	}
	// Four times the cap of silent connections.
	var silent []net.Conn
	for range 16 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		silent = append(silent, c)
	}
	time.Sleep(4 * MinAge * 4)
	if n := ln.Len(); n > 4 {
		t.Errorf("%d connections held, over the cap of 4", n)
	}
	if err := ask(); err != nil {
		t.Errorf("the authenticated connection was closed to make room: %v", err)
	}
	// The first silent ones were closed to make room for the last.
	silent[0].SetReadDeadline(time.Now().Add(time.Second))
	if _, err := silent[0].Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("the oldest silent connection reads %v, want EOF (closed)", err)
	}
}
