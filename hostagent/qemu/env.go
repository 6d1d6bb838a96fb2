package qemu

import "strings"

// allowedEnv is what QEMU needs from the server's environment to start and
// find its files (ref 3.4 allowlistedEnvironment). A QEMU outlives the
// server, so it must not keep anything secret the server was given
// (INVISIBLE_DOTS_TOKEN, DATABASE_URL, an OpenRouter key): only these pass.
var allowedEnv = map[string]bool{
	"PATH": true, "HOME": true, "USER": true, "LOGNAME": true,
	"LANG": true, "LANGUAGE": true, "TZ": true, "TMPDIR": true,
	"XDG_RUNTIME_DIR": true,
}

// allowlistedEnvironment filters environ ("NAME=value" entries) to the
// allowlist plus the LC_* locale variables.
func allowlistedEnvironment(environ []string) []string {
	var out []string
	for _, kv := range environ {
		name, _, ok := strings.Cut(kv, "=")
		if !ok {
			continue
		}
		if allowedEnv[name] || strings.HasPrefix(name, "LC_") {
			out = append(out, kv)
		}
	}
	return out
}
