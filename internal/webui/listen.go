package webui

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// DefaultListen is where the web client listens unless EnvListen says
// otherwise: a loopback address other than 127.0.0.1, which the guests reach.
const DefaultListen = "127.0.0.2:3000"

// Listen is where the web client serves and how.
type Listen struct {
	// Address is host:port.
	Address string
	// SignIn: each person signs in with their own credential and every
	// request carries it; the server's admin credential is not used.
	SignIn bool
	// ForcedSignIn says why SignIn is on although it was not asked for:
	// the address is one others reach.
	ForcedSignIn string
	// TLS: the address is reached from other machines, so the page and
	// the session cookie travel over HTTPS.
	TLS bool
}

// URL is the address a person opens: for every address of the machine
// (0.0.0.0, ::), its name, which the certificate names too.
func (l Listen) URL() string {
	scheme := "http://"
	if l.TLS {
		scheme = "https://"
	}
	host, port, err := net.SplitHostPort(l.Address)
	if ip := net.ParseIP(host); err == nil && ip != nil && ip.IsUnspecified() {
		host = "localhost"
		if name, err := os.Hostname(); err == nil && name != "" {
			host = strings.ToLower(name)
		}
		return scheme + net.JoinHostPort(host, port)
	}
	return scheme + l.Address
}

// ParseListen checks a listen setting (empty means DefaultListen) before
// anything starts: an IP address and a port from 1 to 65535 (port 0 would
// leave the person with no address to open). signIn is what the person
// asked for (server --web-sign-in); an address where the web client would
// serve someone other than the machine's owner turns it on (see
// othersReach), and one reached from other machines turns on TLS.
func ParseListen(s string, signIn bool) (Listen, error) {
	if s == "" {
		s = DefaultListen
	}
	host, port, err := net.SplitHostPort(s)
	if err == nil && host == "" {
		err = errors.New("no host")
	}
	if err == nil {
		var n int
		n, err = strconv.Atoi(port)
		if err == nil && (n < 1 || n > 65535) {
			err = errors.New("port out of range")
		}
	}
	if err != nil {
		return Listen{}, fmt.Errorf("%s=%q is not host:port with a port from 1 to 65535 (for example %s): %v", EnvListen, s, DefaultListen, err)
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return Listen{}, fmt.Errorf("%s=%q: the web client listens on an IP address, not a name (%q may stand for an address every Dot's guest or another machine reaches): give the address, such as %s, or 0.0.0.0 for every address of this machine (people then sign in)", EnvListen, s, host, DefaultListen)
	}
	l := Listen{Address: s, SignIn: signIn, TLS: !ip.IsLoopback()}
	if why := othersReach(ip); why != "" && !signIn {
		l.SignIn, l.ForcedSignIn = true, why
	}
	return l, nil
}

// othersReach says who besides the machine's owner reaches ip, or "". Every
// guest reaches this machine's 127.0.0.1 (and ::1) as 10.0.2.2 through
// QEMU's user network, and other machines reach an address that is not
// loopback; another loopback address of 127.0.0.0/8 is reached by neither.
// Without sign-in the web client acts with the server's admin credential
// for whoever reaches it, so a Dot's model that reached it could read every
// Secret and approve its own calls: there, people sign in.
func othersReach(ip net.IP) string {
	switch {
	case ip.Equal(net.IPv4(127, 0, 0, 1)) || ip.Equal(net.IPv6loopback):
		return fmt.Sprintf("every Dot's guest reaches this machine's %s (as 10.0.2.2)", ip)
	case !ip.IsLoopback():
		return fmt.Sprintf("%s is reached from other machines", ip)
	}
	return ""
}

// Published is what a running server says of its web client in the home
// (home.Layout.WebAddress), for the commands that tell people where to go.
type Published struct {
	URL    string `json:"url"`
	SignIn bool   `json:"signIn"`
}

// Publish writes p to path (the server removes it when it stops).
func Publish(path string, p Published) error {
	data, err := json.Marshal(p)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}

// ReadPublished is what the home's running server published, false when no
// server of the home serves a web client.
func ReadPublished(path string) (Published, bool) {
	var p Published
	data, err := os.ReadFile(path)
	if err != nil || json.Unmarshal(data, &p) != nil || p.URL == "" {
		return Published{}, false
	}
	return p, true
}
