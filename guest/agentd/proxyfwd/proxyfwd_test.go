package proxyfwd

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/proxy"

	"github.com/invisible-dots/invisible-dots/guest/agentd/proxyfwd/proxyfwdtest"
)

// getThrough asks the forwarder, as Chromium does (SOCKS5, no credentials,
// the name unresolved), for http://proxyfwdtest.SiteName/page.
func getThrough(f *Forwarder) (string, error) {
	d, err := proxy.SOCKS5("tcp", strings.TrimPrefix(f.URL(), "socks5://"), nil, &net.Dialer{Timeout: 5 * time.Second})
	if err != nil {
		return "", err
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: d.(proxy.ContextDialer).DialContext,
	}}
	resp, err := client.Get("http://" + proxyfwdtest.SiteName + "/page")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

func TestForwarderCarriesTheCredentialsTheBrowserCannot(t *testing.T) {
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "page %s of %s", r.URL.Path, r.Host)
	}))
	defer site.Close()
	socks := proxyfwdtest.StartFakeSOCKS5Proxy(t, site.Listener.Addr().String())
	httpp := proxyfwdtest.StartFakeHTTPProxy(t, site.Listener.Addr().String(), false)
	httpsp := proxyfwdtest.StartFakeHTTPProxy(t, site.Listener.Addr().String(), true)
	rootCAs = httpsp.Server.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	defer func() { rootCAs = nil }()
	type seer interface{ Seen() proxyfwdtest.Seen }
	for name, tc := range map[string]struct {
		url  func(user, pass string) string
		seen seer
	}{
		"socks5":  {socks.URL, socks},
		"socks5h": {func(u, p string) string { return strings.Replace(socks.URL(u, p), "socks5:", "socks5h:", 1) }, socks},
		"http":    {httpp.URL, httpp},
		"https":   {httpsp.URL, httpsp},
	} {
		t.Run(name, func(t *testing.T) {
			before := tc.seen.Seen()
			d, err := NewDialer(tc.url(proxyfwdtest.User, proxyfwdtest.Password))
			if err != nil {
				t.Fatal(err)
			}
			f, err := Listen(d)
			if err != nil {
				t.Fatal(err)
			}
			var logged bytes.Buffer
			var lmu sync.Mutex
			f.Logf = func(format string, a ...any) { lmu.Lock(); fmt.Fprintf(&logged, format, a...); lmu.Unlock() }
			go f.Serve()
			defer f.Close()
			if !strings.HasPrefix(f.URL(), "socks5://127.0.0.1:") {
				t.Errorf("the browser's proxy is %s, want one on the loopback", f.URL())
			}
			body, err := getThrough(f)
			if err != nil || body != "page /page of "+proxyfwdtest.SiteName {
				t.Fatalf("GET through the forwarder = %q, %v", body, err)
			}
			seen := tc.seen.Seen()
			auths, dests := seen.Auths[len(before.Auths):], seen.Dests[len(before.Dests):]
			if want := proxyfwdtest.User + ":" + proxyfwdtest.Password; len(auths) != 1 || auths[0] != want {
				t.Errorf("the stand-in proxy was given the credentials %q, want %q once", auths, want)
			}
			if len(dests) != 1 || dests[0] != proxyfwdtest.SiteName+":80" {
				t.Errorf("the stand-in proxy was asked for %q, want the name unresolved", dests)
			}

			// A wrong password: the browser's connection fails, and nothing
			// the forwarder says holds a password.
			bad, err := NewDialer(tc.url(proxyfwdtest.User, "wrong-secret"))
			if err != nil {
				t.Fatal(err)
			}
			g, err := Listen(bad)
			if err != nil {
				t.Fatal(err)
			}
			g.Logf = f.Logf
			go g.Serve()
			defer g.Close()
			if body, err := getThrough(g); err == nil {
				t.Errorf("GET through a proxy that refused the password = %q", body)
			}
			lmu.Lock()
			said := logged.String()
			lmu.Unlock()
			if said == "" || strings.Contains(said, "wrong-secret") || strings.Contains(said, proxyfwdtest.Password) {
				t.Errorf("the forwarder said %q: want the failure, without a password", said)
			}
		})
	}
}

func TestNeedsForwarding(t *testing.T) {
	for raw, want := range map[string]bool{
		"socks5://alice:pw@proxy.example:1080":  true,
		"socks5h://alice:pw@proxy.example:1080": true,
		"SOCKS5://alice@proxy.example":          true,
		"http://alice:pw@proxy.example:3128":    true,
		"https://alice:pw@proxy.example":        true,
		"socks5://proxy.example:1080":           false,
		"http://proxy.example:3128":             false,
		"socks4://alice@proxy.example:1080":     false,
		"proxy.example:3128":                    false,
		"":                                      false,
	} {
		if got := NeedsForwarding(raw); got != want {
			t.Errorf("NeedsForwarding(%q) = %v, want %v", raw, got, want)
		}
	}
	if _, err := NewDialer("ftp://alice:s3cret@proxy.example"); err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("NewDialer of an ftp proxy = %v", err)
	}
}

// TestRunGivesTheProgramOnlyTheLocalProxy runs the subcommand's body with a
// program that says what it was given.
func TestRunGivesTheProgramOnlyTheLocalProxy(t *testing.T) {
	var out, errOut bytes.Buffer
	env := append(os.Environ(), EnvUpstream+"=socks5://alice:s3cret@127.0.0.1:1", "PLAYWRIGHT_MCP_PROXY_SERVER=old")
	code, err := Run(context.Background(), Options{
		As: "PLAYWRIGHT_MCP_PROXY_SERVER", Environ: env, Stdout: &out, Stderr: &errOut,
		Argv: []string{"sh", "-c", `echo "$PLAYWRIGHT_MCP_PROXY_SERVER"; echo "${` + EnvUpstream + `:-unset}"; exit 3`},
	})
	if err != nil || code != 3 {
		t.Fatalf("Run = %d, %v (%s); want the program's 3", code, err, errOut.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "socks5://127.0.0.1:") || lines[1] != "unset" {
		t.Errorf("the program was given %q; want the local proxy and no upstream", lines)
	}
	if code, err := Run(context.Background(), Options{As: "P", Environ: os.Environ(), Argv: []string{"true"}, Stdout: &out, Stderr: &errOut}); code != ExitUsage || err == nil {
		t.Errorf("Run without an upstream = %d, %v", code, err)
	}
	if code, err := Run(context.Background(), Options{As: "P", Environ: []string{EnvUpstream + "=socks4://a:s3cret@h:1"}, Argv: []string{"true"}, Stdout: &out, Stderr: &errOut}); code != ExitUsage || err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("Run with an upstream it cannot speak to = %d, %v", code, err)
	}
}
