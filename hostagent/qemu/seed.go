package qemu

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/google/renameio/v2"
	"github.com/kdomanski/iso9660"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/home"
)

// sudoersPoweroff is the one sudo rule of ref 4.1: dotagentd may run exactly
// the poweroff command dot-agentd starts, and nothing else.
var sudoersPoweroff = protocol.UserDotAgentd + " ALL=(root) NOPASSWD: " + strings.Join(protocol.PoweroffArgv[2:], " ") + "\n"

// seedFiles returns the NoCloud seed's files and its instance id. The id is
// iid-<namespace>.<name>-<hash of the seed's content>, so cloud-init re-runs
// its per-instance steps exactly when what the seed says changes (ref 3.4).
func seedFiles(id home.VMID, cfg protocol.GuestConfig) (map[string][]byte, string, error) {
	if err := cfg.Validate(); err != nil {
		return nil, "", err
	}
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		return nil, "", fmt.Errorf("encode guest config: %w", err)
	}
	var ud strings.Builder
	ud.WriteString("#cloud-config\n")
	ud.WriteString("write_files:\n")
	fmt.Fprintf(&ud, "  - path: %s\n    owner: %s:%s\n    permissions: '0600'\n    encoding: b64\n    content: %s\n    defer: true\n",
		protocol.GuestConfigPath, protocol.UserDotAgentd, protocol.UserDotAgentd, base64.StdEncoding.EncodeToString(cfgJSON))
	fmt.Fprintf(&ud, "  - path: /etc/sudoers.d/invisible-dots-poweroff\n    owner: root:root\n    permissions: '0440'\n    encoding: b64\n    content: %s\n",
		base64.StdEncoding.EncodeToString([]byte(sudoersPoweroff)))
	userData := []byte(ud.String())

	h := sha256.New()
	for _, part := range [][]byte{userData, cfgJSON} {
		fmt.Fprintf(h, "%d\n", len(part))
		h.Write(part)
	}
	instanceID := "iid-" + id.String() + "-" + hex.EncodeToString(h.Sum(nil))[:16]
	hostname := cfg.Hostname
	if hostname == "" {
		hostname = id.Name
	}
	metaData := []byte("instance-id: " + instanceID + "\nlocal-hostname: " + hostname + "\n")
	return map[string][]byte{
		protocol.SeedMetaDataFile:    metaData,
		protocol.SeedUserDataFile:    userData,
		protocol.SeedGuestConfigFile: cfgJSON,
	}, instanceID, nil
}

// writeSeed writes the seed ISO to dest atomically, private to the server's
// user (it holds the token), and returns the instance id.
func writeSeed(dest string, id home.VMID, cfg protocol.GuestConfig) (string, error) {
	files, iid, err := seedFiles(id, cfg)
	if err != nil {
		return "", err
	}
	if err := writeISO(dest, protocol.SeedVolumeLabel, files); err != nil {
		return "", err
	}
	return iid, nil
}

// writeISO writes files (name -> content, names as protocol defines them) as
// an ISO 9660 image labelled label. The writer stages files in a private
// temporary directory of its own (0700) and removes it.
func writeISO(dest, label string, files map[string][]byte) error {
	w, err := iso9660.NewWriter()
	if err != nil {
		return fmt.Errorf("write %s: %w", dest, err)
	}
	defer w.Cleanup()
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := w.AddFile(bytes.NewReader(files[n]), n); err != nil {
			return fmt.Errorf("write %s: add %s: %w", dest, n, err)
		}
	}
	f, err := renameio.NewPendingFile(dest, renameio.WithTempDir(filepath.Dir(dest)), renameio.WithStaticPermissions(home.PrivateFileMode))
	if err != nil {
		return fmt.Errorf("write %s: %w", dest, err)
	}
	defer f.Cleanup()
	if err := w.WriteTo(f, label); err != nil {
		return fmt.Errorf("write %s: %w", dest, err)
	}
	if err := f.CloseAtomicallyReplace(); err != nil {
		return fmt.Errorf("write %s: %w", dest, err)
	}
	return nil
}

// readISO returns the label and the root directory's files of an ISO, as
// Linux shows them (no Rock Ridge: the ";1" version suffix dropped). Tests
// read the seed back with it.
func readISO(path string) (string, map[string][]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", nil, err
	}
	defer f.Close()
	img, err := iso9660.OpenImage(f)
	if err != nil {
		return "", nil, fmt.Errorf("open %s as ISO 9660: %w", path, err)
	}
	label, err := img.Label()
	if err != nil {
		return "", nil, err
	}
	root, err := img.RootDir()
	if err != nil {
		return "", nil, err
	}
	children, err := root.GetChildren()
	if err != nil {
		return "", nil, err
	}
	out := map[string][]byte{}
	for _, c := range children {
		if c.IsDir() {
			continue
		}
		b, err := io.ReadAll(c.Reader())
		if err != nil {
			return "", nil, err
		}
		out[strings.TrimSuffix(c.Name(), ";1")] = b
	}
	return label, out, nil
}
