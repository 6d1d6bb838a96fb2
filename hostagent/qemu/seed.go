package qemu

import (
	"cmp"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/invisible-dots/invisible-dots/guest/image/isofs"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/home"
)

// sudoersPoweroff is the one sudo rule of ref 4.1: dotagentd may run exactly
// the poweroff command dot-agentd starts, and nothing else.
var sudoersPoweroff = protocol.UserDotAgentd + " ALL=(root) NOPASSWD: " + strings.Join(protocol.PoweroffArgv[2:], " ") + "\n"

// seedFiles returns the NoCloud seed's files and its instance id. The id is
// iid-<namespace>.<name>-<hash of the seed's content>, so cloud-init re-runs
// its per-instance steps exactly when what the seed says changes (ref 3.4).
// Beside the guest config (dot-agentd's alone, it holds the token) the seed
// carries the engine's environment, which holds no secret and is readable by
// the engine's user.
func seedFiles(id home.VMID, cfg protocol.GuestConfig, env protocol.EngineEnv) (map[string][]byte, string, error) {
	if err := cfg.Validate(); err != nil {
		return nil, "", err
	}
	if err := env.Validate(); err != nil {
		return nil, "", err
	}
	envFile := env.Encode()
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		return nil, "", fmt.Errorf("encode guest config: %w", err)
	}
	var ud strings.Builder
	ud.WriteString("#cloud-config\n")
	ud.WriteString("write_files:\n")
	fmt.Fprintf(&ud, "  - path: %s\n    owner: %s:%s\n    permissions: '0600'\n    encoding: b64\n    content: %s\n    defer: true\n",
		protocol.GuestConfigPath, protocol.UserDotAgentd, protocol.UserDotAgentd, base64.StdEncoding.EncodeToString(cfgJSON))
	fmt.Fprintf(&ud, "  - path: %s\n    owner: root:root\n    permissions: '0644'\n    encoding: b64\n    content: %s\n",
		protocol.EngineEnvPath, base64.StdEncoding.EncodeToString(envFile))
	fmt.Fprintf(&ud, "  - path: /etc/sudoers.d/invisible-dots-poweroff\n    owner: root:root\n    permissions: '0440'\n    encoding: b64\n    content: %s\n",
		base64.StdEncoding.EncodeToString([]byte(sudoersPoweroff)))
	userData := []byte(ud.String())

	h := sha256.New()
	for _, part := range [][]byte{userData, cfgJSON, envFile} {
		fmt.Fprintf(h, "%d\n", len(part))
		h.Write(part)
	}
	instanceID := "iid-" + id.String() + "-" + hex.EncodeToString(h.Sum(nil))[:16]
	hostname := cmp.Or(cfg.Hostname, id.Name)
	metaData := []byte("instance-id: " + instanceID + "\nlocal-hostname: " + hostname + "\n")
	return map[string][]byte{
		protocol.SeedMetaDataFile:    metaData,
		protocol.SeedUserDataFile:    userData,
		protocol.SeedGuestConfigFile: cfgJSON,
		protocol.SeedEngineEnvFile:   envFile,
		protocol.SeedSudoersFile:     []byte(sudoersPoweroff),
	}, instanceID, nil
}

// writeSeed writes the seed ISO to dest atomically, private to the server's
// user (it holds the token), and returns the instance id.
func writeSeed(dest string, id home.VMID, cfg protocol.GuestConfig, env protocol.EngineEnv) (string, error) {
	files, iid, err := seedFiles(id, cfg, env)
	if err != nil {
		return "", err
	}
	if err := isofs.Write(dest, protocol.SeedVolumeLabel, files, home.PrivateFileMode); err != nil {
		// The ISO writer words some write errors ("writing files: ...")
		// instead of wrapping them: a full disk is still a full disk.
		return "", home.MarkDiskFull(err, err.Error())
	}
	return iid, nil
}
