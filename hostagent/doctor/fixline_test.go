package doctor

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/invisible-dots/invisible-dots/hostagent/hostconfig"
	"github.com/invisible-dots/invisible-dots/internal/home"
)

// commands are the programs (and shell builtins) a fix may run: a fix is
// pasted into a shell, so its first word, and each word after a pipe, &&,
// || or sudo, is one of these. A sentence ("enable virtualization ...")
// starts with none of them.
var commands = map[string]bool{
	"invisible-dots": true, "sudo": true, "apt-get": true, "usermod": true, "modprobe": true,
	"lsmod": true, "grep": true, "df": true, "du": true, "ls": true, "mv": true, "sed": true,
	"export": true, "unset": true, "make": true,
}

// checkFixLine says why fix is not one command line a person can paste into
// a shell as it is, or returns nil. bash parses it (bash -n: a syntax error
// such as prose in parentheses is refused), and the words are read strictly:
// no parentheses or sentence punctuation outside quotes, no placeholder, and
// every command a known program.
func checkFixLine(fix string) error {
	if fix == "" {
		return fmt.Errorf("no command")
	}
	if strings.ContainsAny(fix, "\n\r\t") || strings.Contains(fix, "  ") {
		return fmt.Errorf("%q is not one plainly spaced line", fix)
	}
	if bash, err := exec.LookPath("bash"); err == nil {
		if out, err := exec.Command(bash, "-n", "-c", fix).CombinedOutput(); err != nil {
			return fmt.Errorf("%q does not parse as a shell command: %s", fix, strings.TrimSpace(string(out)))
		}
	}
	words, err := shellWords(fix)
	if err != nil {
		return fmt.Errorf("%q: %w", fix, err)
	}
	expectCommand := true
	for _, w := range words {
		switch {
		case w.op:
			if expectCommand {
				return fmt.Errorf("%q: %s with no command before it", fix, w.text)
			}
			expectCommand = true
			continue
		case expectCommand:
			if !commands[w.text] {
				return fmt.Errorf("%q: %q is not a command a person runs (prose, or a program the test does not know)", fix, w.text)
			}
			expectCommand = w.text == "sudo"
			continue
		}
		if w.quoted {
			continue
		}
		if strings.ContainsAny(w.text, "()`<>") {
			return fmt.Errorf("%q: %q holds a parenthesis, a backquote or a redirection", fix, w.text)
		}
		if last := w.text[len(w.text)-1]; strings.IndexByte(",;:.", last) >= 0 && w.text != "." {
			return fmt.Errorf("%q: %q ends like a word of a sentence", fix, w.text)
		}
		if strings.Contains(strings.ToLower(w.text), "/a/plain") || w.text == "then" || w.text == "or" {
			return fmt.Errorf("%q: %q is prose or a placeholder", fix, w.text)
		}
	}
	if expectCommand {
		return fmt.Errorf("%q ends where a command is wanted", fix)
	}
	return nil
}

type shellWord struct {
	text   string
	quoted bool // some of it was in quotes
	op     bool // |, ||, && or ;
}

// shellWords splits a line as a POSIX shell does, well enough for the test:
// single and double quotes, and the operators that start a new command.
func shellWords(line string) ([]shellWord, error) {
	var out []shellWord
	var cur strings.Builder
	inWord, quoted := false, false
	flush := func() {
		if inWord {
			out = append(out, shellWord{text: cur.String(), quoted: quoted})
		}
		cur.Reset()
		inWord, quoted = false, false
	}
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == ' ':
			flush()
		case c == '\'' || c == '"':
			end := strings.IndexByte(line[i+1:], c)
			if end < 0 {
				return nil, fmt.Errorf("an unclosed %c", c)
			}
			cur.WriteString(line[i+1 : i+1+end])
			inWord, quoted = true, true
			i += end + 1
		case c == '|' || c == '&' || c == ';':
			flush()
			op := string(c)
			if i+1 < len(line) && line[i+1] == c && c != ';' {
				op += string(c)
				i++
			}
			if op == "&" {
				return nil, fmt.Errorf("a command sent to the background")
			}
			out = append(out, shellWord{text: op, op: true})
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	flush()
	return out, nil
}

// checkFixes fails the test for every row of rep whose fix is not a command
// line, or that is not ok and has none, or whose fix has no words beside it.
func checkFixes(t *testing.T, reason string, rep Report) {
	t.Helper()
	for _, c := range rep.Checks {
		if c.Status == OK && c.Fix == "" {
			continue
		}
		if err := checkFixLine(c.Fix); err != nil {
			t.Errorf("%s: row %q (%s): its fix is not a command to paste: %v", reason, c.Name, c.Status, err)
		}
		if strings.TrimSpace(c.FixWhy) == "" {
			t.Errorf("%s: row %q: fix %q has no explanation beside it", reason, c.Name, c.Fix)
		}
	}
}

// TestFixLineCheck: the check refuses the prose fixes the doctor used to give
// (each a syntax error or a sentence in a shell), and takes commands.
func TestFixLineCheck(t *testing.T) {
	for _, bad := range []string{
		"invisible-dots setup (records cpuModel " + hostconfig.CPUModelNoArchCapabilities + " in host.yaml)",
		"sudo apt-get install -y qemu-system-x86 (or: invisible-dots setup)",
		"sudo apt-get install -y postgresql (or: invisible-dots setup), or set DATABASE_URL to an existing server",
		"sudo usermod -aG kvm $USER, then log in again",
		"enable virtualization (VT-x/AMD-V) in the firmware, then sudo modprobe kvm_intel (or kvm_amd)",
		"remove 'accelerator: tcg' from /home/a/host.yaml to use kvm (tcg is for test hosts only)",
		"export INVISIBLE_DOTS_HOME=/a/plain/ascii/path (no comma)",
		"check that /home/a is readable",
		"ls -ld /home/a  (the home must be writable by the user who runs the server; fix its owner or mount)",
		"df -h /home/a  (how full the home's filesystem is)",
		"make build (npm ci and the client's build, then the binary)",
		"start invisible-dots server, then: invisible-dots secret openrouter",
		"install QEMU into /opt/q or unset INVISIBLE_DOTS_QEMU_DIR; sudo apt-get install -y qemu-system-x86",
		"invisible-dots image build (or make test-image)",
		"",
	} {
		if err := checkFixLine(bad); err == nil {
			t.Errorf("the check took %q, which is not a command to paste", bad)
		}
	}
	for _, good := range []string{
		"invisible-dots setup",
		"sudo apt-get install -y qemu-system-x86",
		"unset INVISIBLE_DOTS_QEMU_DIR && sudo apt-get install -y qemu-system-x86",
		"lsmod | grep -E 'kvm|vbox|vmw'",
		"sed -i '/^accelerator:/d' '/home/a b/config/host.yaml'",
		"sudo modprobe kvm_intel || sudo modprobe kvm_amd",
	} {
		if err := checkFixLine(good); err != nil {
			t.Errorf("the check refused a command: %v", err)
		}
	}
}

// TestFixLinesAreCommands drives the rows no table of TestDoctor reaches (a
// home QEMU cannot be given with a space in it, the QEMU directory chosen by
// the environment, KVM not loaded, a host.yaml that does not parse, a disk
// full by the agent's record, the key's rows, the web client's), and checks
// each fix is a command line with its words beside it; TestDoctor checks the
// same of every one of its cases. Render shows both, each on a line.
func TestFixLinesAreCommands(t *testing.T) {
	more := map[string]func(t *testing.T, m *machine, h *home.Layout, d *Deps){
		"a home with a space and a comma": func(t *testing.T, m *machine, h *home.Layout, d *Deps) {
			h.Root = h.Root + "/my dots,old"
			d.Home = *h
		},
		"QEMU directory chosen": func(t *testing.T, m *machine, h *home.Layout, d *Deps) {
			env := map[string]string{home.EnvQEMUDir: t.TempDir(), "PATH": ""}
			d.Getenv = func(k string) string { return env[k] }
		},
		"kvm module not loaded": func(t *testing.T, m *machine, h *home.Layout, d *Deps) {
			m.kvmErr = errNotExist
			m.probe[hostconfig.CPUModel] = Result{ExitCode: 1, Output: "Could not access KVM kernel module: No such file or directory"}
		},
		"host.yaml does not parse": func(t *testing.T, m *machine, h *home.Layout, d *Deps) {
			writeFile(t, h.HostConfig(), "accelerator: [")
		},
		"tcg in a home with a space": func(t *testing.T, m *machine, h *home.Layout, d *Deps) {
			h.Root = h.Root + "/my dots"
			d.Home = *h
			registerImages(t, *h)
			hostconfig.Save(*h, hostconfig.Config{Accelerator: hostconfig.TCG})
		},
		"free space unreadable": func(t *testing.T, m *machine, h *home.Layout, d *Deps) {
			d.FreeBytes = func(string) (uint64, error) { return 0, fmt.Errorf("permission denied") }
		},
		"disk full by the agent's record": func(t *testing.T, m *machine, h *home.Layout, d *Deps) {
			h.NoteWrite(h.Root+"/vms/x/overlay.qcow2", &os.PathError{Op: "write", Path: h.Root + "/vms/x/overlay.qcow2", Err: syscall.ENOSPC})
		},
		"key missing": func(t *testing.T, m *machine, h *home.Layout, d *Deps) {
			d.OpenRouterKey = func(context.Context) (bool, error) { return false, nil }
		},
		"server not running": func(t *testing.T, m *machine, h *home.Layout, d *Deps) {
			d.OpenRouterKey = func(context.Context) (bool, error) { return false, fmt.Errorf("%w: no kubeconfig", ErrNotChecked) }
		},
		"web client not built": func(t *testing.T, m *machine, h *home.Layout, d *Deps) {
			d.WebClientBuilt = func() bool { return false }
		},
	}
	for name, setup := range more {
		t.Run(name, func(t *testing.T) {
			h := home.Layout{Root: t.TempDir()}
			registerImages(t, h)
			m := goodMachine(t)
			d := m.deps(t, h)
			setup(t, m, &h, &d)
			rep := Run(context.Background(), d)
			notOK := 0
			for _, c := range rep.Checks {
				if c.Status != OK {
					notOK++
				}
			}
			if notOK == 0 {
				t.Fatalf("no row is not ok: the case gives no fix to check\n%s", Render(rep))
			}
			checkFixes(t, name, rep)
			// Render: the command alone on its line, the words on the next.
			out := Render(rep)
			for _, c := range rep.Checks {
				if c.Status == OK {
					continue
				}
				if !strings.Contains(out, "fix: "+c.Fix+"\n") || !strings.Contains(out, "why: "+c.FixWhy+"\n") {
					t.Errorf("Render does not give %q's command and its words each on a line:\n%s", c.Name, out)
				}
			}
		})
	}
}

var errNotExist = os.ErrNotExist

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}
