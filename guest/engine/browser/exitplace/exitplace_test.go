package exitplace

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/invisible-dots/invisible-dots/guest/agentd/proxyfwd/proxyfwdtest"
)

// ripeNCC is an address of the RIPE NCC in Amsterdam, in the Netherlands
// (one time zone) since long before Debian's GeoIP data was made.
const ripeNCC = "193.0.6.139"

// echo is a stand-in address-echo service answering with what.
func echo(t *testing.T, status int, what string) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(status)
		fmt.Fprintln(w, what)
	}))
	t.Cleanup(s.Close)
	return s
}

// realGeo skips a test that needs Debian's geoiplookup and tzdata.
func realGeo(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("geoiplookup"); err != nil {
		t.Skip("geoiplookup is not installed (apt-get install geoip-bin geoip-database; hack/deps installs it)")
	}
	if _, err := os.Stat(DefaultZoneTab); err != nil {
		t.Skipf("no %s (Debian's tzdata)", DefaultZoneTab)
	}
}

// The exit is learned through the identity's own SOCKS5 proxy with its user
// and password, and placed with the real GeoIP database and tzdata.
func TestAnExitThroughAProxyWithCredentialsIsPlaced(t *testing.T) {
	realGeo(t)
	site := echo(t, http.StatusOK, ripeNCC)
	proxy := proxyfwdtest.StartFakeSOCKS5Proxy(t, strings.TrimPrefix(site.URL, "http://"))
	p := Learn(context.Background(), Options{EchoURLs: []string{"http://" + proxyfwdtest.SiteName + "/"}},
		proxy.URL(proxyfwdtest.User, proxyfwdtest.Password))
	want := Place{Address: ripeNCC, Country: "NL", TimeZone: "Europe/Amsterdam", Locale: "nl-NL"}
	if p != want {
		t.Fatalf("Learn() = %+v; want %+v", p, want)
	}
	seen := proxy.Seen()
	if !slices.Contains(seen.Auths, proxyfwdtest.User+":"+proxyfwdtest.Password) || !slices.Contains(seen.Dests, proxyfwdtest.SiteName+":80") {
		t.Errorf("the proxy saw %+v; want the credentials and %s:80", seen, proxyfwdtest.SiteName)
	}
}

func TestTheFirstEchoThatAnswersWins(t *testing.T) {
	down := echo(t, http.StatusOK, "")
	down.Close()
	bad := echo(t, http.StatusOK, "<html>not an address</html>")
	failing := echo(t, http.StatusServiceUnavailable, "busy")
	good := echo(t, http.StatusOK, "2001:db8::1")
	addr, err := ExitAddress(context.Background(), []string{down.URL, bad.URL, failing.URL, good.URL}, "")
	if err != nil || addr != netip.MustParseAddr("2001:db8::1") {
		t.Fatalf("ExitAddress() = %v, %v; want the fourth echo's 2001:db8::1", addr, err)
	}
	_, err = ExitAddress(context.Background(), []string{bad.URL, failing.URL}, "")
	if err == nil || !strings.Contains(err.Error(), "not an address") || !strings.Contains(err.Error(), "503") {
		t.Errorf("ExitAddress() with no good echo = %v; want each echo's failure said", err)
	}
}

// Whatever cannot be told leaves the browser with the computer's own time
// zone and locale, and says why; the proxy's password is never in it.
func TestWhatCannotBeToldSaysWhy(t *testing.T) {
	site := echo(t, http.StatusOK, ripeNCC)
	country := func(code string, err error) func(context.Context, netip.Addr) (string, error) {
		return func(context.Context, netip.Addr) (string, error) { return code, err }
	}
	zoneTab := t.TempDir() + "/zone.tab"
	if err := os.WriteFile(zoneTab, []byte("# a table\nNL\t+5222+00454\tEurope/Amsterdam\nUS\t+404251-0740023\tAmerica/New_York\nUS\t+340308-1181434\tAmerica/Los_Angeles\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		o      Options
		proxy  string
		want   Place
		reason string
	}{
		"no echo answers": {o: Options{EchoURLs: []string{"http://127.0.0.1:1/"}}, proxy: "socks5://alice:s3cret-pw@127.0.0.1:1",
			want: Place{}, reason: "could not be learned"},
		"an address the database does not know": {o: Options{EchoURLs: []string{site.URL}, Country: country("", errors.New("the GeoIP database does not know it")), ZoneTab: zoneTab},
			want: Place{Address: ripeNCC}, reason: "could not be placed"},
		"a country of several time zones": {o: Options{EchoURLs: []string{site.URL}, Country: country("US", nil), ZoneTab: zoneTab},
			want: Place{Address: ripeNCC, Country: "US", Locale: "en-US"}, reason: "US has 2 time zones"},
		"a country tzdata does not name": {o: Options{EchoURLs: []string{site.URL}, Country: country("FR", nil), ZoneTab: zoneTab},
			want: Place{Address: ripeNCC, Country: "FR", Locale: "fr-FR"}, reason: "no time zone for FR"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := Learn(context.Background(), tc.o, tc.proxy)
			why := p.Why
			p.Why = ""
			if p != tc.want || !strings.Contains(why, tc.reason) {
				t.Errorf("Learn() = %+v, why %q; want %+v, why with %q", p, why, tc.want, tc.reason)
			}
			if strings.Contains(why, "s3cret") {
				t.Errorf("why %q holds the proxy's password", why)
			}
		})
	}
}

func TestParseGeoIP(t *testing.T) {
	for out, want := range map[string]string{
		"GeoIP Country Edition: NL, Netherlands\n":       "NL",
		"GeoIP Country V6 Edition: CZ, Czech Republic\n": "CZ",
		"GeoIP Country Edition: IP Address not found\n":  "",
		"GeoIP Country Edition: --, N/A\n":               "",
		"something else":                                 "",
	} {
		got, err := parseGeoIP(out)
		if got != want || (want == "") != (err != nil) {
			t.Errorf("parseGeoIP(%q) = %q, %v; want %q", out, got, err, want)
		}
	}
}

func TestLocaleOf(t *testing.T) {
	for country, want := range map[string]string{
		"NL": "nl-NL", "DE": "de-DE", "CH": "de-CH", "JP": "ja-JP", "BR": "pt-BR", "US": "en-US", "ZZ": "", "nl": "nl-NL", "": "",
	} {
		if got := LocaleOf(country); got != want {
			t.Errorf("LocaleOf(%q) = %q; want %q", country, got, want)
		}
	}
}
