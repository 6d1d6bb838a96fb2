// Package exitplace tells where a browser identity meets the internet, so
// that its time zone and locale follow the exit its browser actually uses
// (ref 6): the exit's address is learned at each launch from address-echo
// services, through the identity's proxy when it has one and from the
// computer's own egress otherwise, and placed in a country with the GeoIP
// database Debian ships in the golden image (geoip-database, read with
// geoip-bin's geoiplookup). The country gives the time zone when it has only
// one (tzdata's zone.tab) and the locale from its likely language (CLDR,
// golang.org/x/text). Whatever cannot be told leaves the browser with the
// computer's own time zone and locale, and the Place says why.
//
// Debian 12's geoip-database is the legacy country edition, last refreshed
// in 2019: an address allocated or moved since may be unknown or misplaced.
// Nothing better ships in Debian (mmdb-bin reads MaxMind DB files, which
// Debian does not ship), and nothing here downloads one.
package exitplace

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"time"

	"golang.org/x/text/language"

	"github.com/invisible-dots/invisible-dots/guest/agentd/proxyfwd"
)

// DefaultEchoURLs are the address-echo services asked, in order, until one
// answers (ref 6 names these three).
var DefaultEchoURLs = []string{"https://api.ipify.org", "https://icanhazip.com", "https://checkip.amazonaws.com"}

// DefaultZoneTab is tzdata's table of each country's time zones.
const DefaultZoneTab = "/usr/share/zoneinfo/zone.tab"

// DefaultTimeout bounds the whole learning at a launch: a computer with no
// way out must not hold a launch up for long.
const DefaultTimeout = 6 * time.Second

// Place is where an identity's browser meets the internet.
type Place struct {
	// Address is the exit's address as an echo service saw it.
	Address string
	// Country is its ISO 3166 code.
	Country string
	// TimeZone (IANA) and Locale (BCP 47) are for the browser; empty when
	// they cannot be told (the browser keeps the computer's).
	TimeZone string
	Locale   string
	// Why says what could not be told and why, when anything could not.
	Why string
}

// Placed says whether the browser gets a time zone or a locale of the exit.
func (p Place) Placed() bool { return p.TimeZone != "" || p.Locale != "" }

// Options say how to learn a place; zero values are the product's.
type Options struct {
	// EchoURLs are asked in order (DefaultEchoURLs when empty).
	EchoURLs []string
	// Timeout bounds the learning (DefaultTimeout when zero).
	Timeout time.Duration
	// Country places an address (GeoIPLookup when nil).
	Country func(ctx context.Context, addr netip.Addr) (string, error)
	// ZoneTab is tzdata's zone.tab (DefaultZoneTab when empty).
	ZoneTab string
}

// Learn asks the echo services for the exit's address through proxyURL ("":
// the computer's own egress) and places it. It never fails: what it cannot
// tell is in the Place's Why. proxyURL is never in Why.
func Learn(ctx context.Context, o Options, proxyURL string) Place {
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(o.Timeout, DefaultTimeout))
	defer cancel()
	echoURLs := o.EchoURLs
	if len(echoURLs) == 0 {
		echoURLs = DefaultEchoURLs
	}
	addr, err := ExitAddress(ctx, echoURLs, proxyURL)
	if err != nil {
		return Place{Why: "the exit's address could not be learned: " + err.Error()}
	}
	p := Place{Address: addr.String()}
	country := o.Country
	if country == nil {
		country = GeoIPLookup
	}
	if p.Country, err = country(ctx, addr); err != nil {
		p.Why = fmt.Sprintf("the exit %s could not be placed in a country: %v", addr, err)
		return p
	}
	p.Locale = LocaleOf(p.Country)
	zones, err := ZonesOf(cmp.Or(o.ZoneTab, DefaultZoneTab), p.Country)
	switch {
	case err != nil:
		p.Why = "the time zones could not be read: " + err.Error()
	case len(zones) == 1:
		p.TimeZone = zones[0]
	case len(zones) == 0:
		p.Why = fmt.Sprintf("tzdata names no time zone for %s", p.Country)
	default:
		p.Why = fmt.Sprintf("%s has %d time zones and the database tells only the country", p.Country, len(zones))
	}
	if p.Locale == "" {
		p.Why = strings.TrimPrefix(p.Why+"; no likely language is known for "+p.Country, "; ")
	}
	return p
}

// maxEchoBody bounds an echo's answer: an address and a newline.
const maxEchoBody = 128

// ExitAddress asks each echo URL in turn through proxyURL ("": directly),
// and returns the first address one answers with. Its errors never quote
// proxyURL, which may hold a password.
func ExitAddress(ctx context.Context, echoURLs []string, proxyURL string) (netip.Addr, error) {
	client, err := clientThrough(proxyURL)
	if err != nil {
		return netip.Addr{}, err
	}
	defer client.CloseIdleConnections()
	var errs []error
	for _, u := range echoURLs {
		addr, err := ask(ctx, client, u)
		if err == nil {
			return addr, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return netip.Addr{}, errors.Join(errs...)
}

func ask(ctx context.Context, client *http.Client, echo string) (netip.Addr, error) {
	host := echo
	if u, err := url.Parse(echo); err == nil {
		host = u.Host
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, echo, nil)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%s: %w", host, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		// The proxy's address is in a url.Error's URL only as the echo's;
		// say the cause alone, never the proxy.
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return netip.Addr{}, fmt.Errorf("%s: %w", host, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxEchoBody))
	if resp.StatusCode != http.StatusOK {
		return netip.Addr{}, fmt.Errorf("%s answered %s", host, resp.Status)
	}
	addr, err := netip.ParseAddr(strings.TrimSpace(string(body)))
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%s answered %q, not an address", host, strings.TrimSpace(string(body)))
	}
	return addr.Unmap(), nil
}

// clientThrough is an HTTP client whose connections go through proxyURL
// as the browser's do: the forwarder's dialer (package proxyfwd), SOCKS5
// with or without a user and password, and HTTP(S) proxies through CONNECT.
// No environment proxy applies: the identity's own is the only one.
func clientThrough(proxyURL string) (*http.Client, error) {
	t := &http.Transport{Proxy: nil, ForceAttemptHTTP2: true, TLSHandshakeTimeout: 5 * time.Second, MaxIdleConns: 1}
	if proxyURL != "" {
		d, err := proxyfwd.NewDialer(proxyURL)
		if err != nil {
			return nil, fmt.Errorf("the identity's proxy cannot be used: %w", err)
		}
		t.DialContext = d.DialContext
	}
	return &http.Client{Transport: t, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}, nil
}

// GeoIPLookup places addr in a country with Debian's geoiplookup (IPv4) or
// geoiplookup6 (IPv6), which read geoip-database's country edition.
func GeoIPLookup(ctx context.Context, addr netip.Addr) (string, error) {
	tool := "geoiplookup"
	if addr.Is6() {
		tool = "geoiplookup6"
	}
	path, err := exec.LookPath(tool)
	if err != nil {
		return "", fmt.Errorf("%s is not installed (Debian's geoip-bin and geoip-database)", tool)
	}
	out, err := exec.CommandContext(ctx, path, addr.String()).Output()
	if err != nil {
		return "", fmt.Errorf("%s %s: %w", tool, addr, err)
	}
	return parseGeoIP(string(out))
}

// parseGeoIP reads geoiplookup's answer, "GeoIP Country Edition: NL,
// Netherlands" (V6 Edition for geoiplookup6), or its "IP Address not found".
func parseGeoIP(out string) (string, error) {
	for _, line := range strings.Split(out, "\n") {
		_, rest, ok := strings.Cut(line, "Edition: ")
		if !ok {
			continue
		}
		code, _, _ := strings.Cut(rest, ",")
		code = strings.TrimSpace(code)
		if len(code) == 2 && code == strings.ToUpper(code) && code != "--" {
			return code, nil
		}
		return "", fmt.Errorf("the GeoIP database does not know it (%s)", strings.TrimSpace(rest))
	}
	return "", fmt.Errorf("geoiplookup answered %q", strings.TrimSpace(out))
}

// ZonesOf lists the time zones zone.tab gives the country code, in the
// table's order.
func ZonesOf(zoneTab, country string) ([]string, error) {
	f, err := os.Open(zoneTab)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var zones []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Split(line, "\t")
		if len(fields) >= 3 && fields[0] == country {
			zones = append(zones, fields[2])
		}
	}
	return zones, sc.Err()
}

// LocaleOf is the likely locale of a country (CLDR's likely subtags:
// "NL" is nl-NL, "CH" de-CH), or "" when none is known.
func LocaleOf(country string) string {
	region, err := language.ParseRegion(country)
	if err != nil || !region.IsCountry() {
		return ""
	}
	tag, err := language.Compose(language.Und, region)
	if err != nil {
		return ""
	}
	base, conf := tag.Base()
	if conf == language.No || base.String() == "und" {
		return ""
	}
	t, err := language.Compose(base, region)
	if err != nil {
		return ""
	}
	return t.String()
}
