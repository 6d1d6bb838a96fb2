package cli

import (
	"strings"
	"testing"
)

func TestParseEtcdServers(t *testing.T) {
	got, err := parseEtcdServers(" http://127.0.0.1:2379, unix:///run/etcd.sock ")
	if err != nil || len(got) != 2 || got[0] != "http://127.0.0.1:2379" || got[1] != "unix:///run/etcd.sock" {
		t.Fatalf("parseEtcdServers() = %q, %v", got, err)
	}
	if got, err := parseEtcdServers(""); got != nil || err != nil {
		t.Errorf("empty = %q, %v; want none", got, err)
	}
	if _, err := parseEtcdServers("ftp://x"); err == nil || !strings.Contains(err.Error(), "ftp://x") {
		t.Errorf("a wrong scheme: %v; want an error naming it", err)
	}
	_, err = parseEtcdServers("https://root:s3cret-pw@etcd:2379")
	if err == nil || strings.Contains(err.Error(), "s3cret-pw") {
		t.Errorf("a URL with a password: %v; want an error that does not repeat it", err)
	}
}
