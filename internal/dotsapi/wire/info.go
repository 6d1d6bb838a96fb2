package wire

// The server's own routes: its health and the doctor of its host (ref 9.6).

// HealthPath is the server's health (GET: Health), for every authenticated
// user.
const HealthPath = Prefix + "health"

// DoctorPath is the doctor's report of the host the server runs on (GET:
// DoctorReport, what `invisible-dots doctor --json` prints), for
// administrators and those bound to the ClusterRole dots-doctor: it runs
// QEMU's accelerator probe on the server's machine.
const DoctorPath = Prefix + "doctor"

// DoctorStatus is the status of one of the doctor's checks.
type DoctorStatus string

const (
	DoctorOK      DoctorStatus = "ok"
	DoctorMissing DoctorStatus = "missing"
	DoctorFailed  DoctorStatus = "failed"
	// DoctorWarning: works, but not as production should (accelerator:
	// tcg).
	DoctorWarning DoctorStatus = "warning"
)

// DoctorCheck is one row of the doctor's report.
type DoctorCheck struct {
	Name   string       `json:"name"`
	Status DoctorStatus `json:"status"`
	Detail string       `json:"detail"`
	// Fix is the command that fixes a row that is not ok: one shell
	// command line, pasted as it is (no prose, no placeholder). A test
	// parses every fix the doctor can give.
	Fix string `json:"fix,omitempty"`
	// FixWhy is what the command does, and what else to do around it
	// (log in again, the other way): the words beside the command.
	FixWhy string `json:"fixWhy,omitempty"`
}

// DoctorReport is the doctor's answer (hostagent/doctor makes it). It is a
// wire type because the command line prints it, the server answers
// DoctorPath with it, and a client reads it without linking the doctor's
// probes (QEMU, the images).
type DoctorReport struct {
	Checks []DoctorCheck `json:"checks"`
	// OK is true when no row is missing or failed (warnings allowed): the
	// host can run Dots.
	OK bool `json:"ok"`
	// Ready is true when every row is ok (ref 11.1): what a script that
	// gates on the doctor asks. ExitCode is the doctor command's
	// (hostagent/doctor's ExitReady, ExitWarnings or ExitNotOK).
	Ready    bool `json:"ready"`
	ExitCode int  `json:"exitCode"`
}

// Row returns the check of a name, for setup and tests.
func (r DoctorReport) Row(name string) (DoctorCheck, bool) {
	for _, c := range r.Checks {
		if c.Name == name {
			return c, true
		}
	}
	return DoctorCheck{}, false
}

// Database kinds of Health.
const (
	// DatabaseManaged: the server runs its own PostgreSQL in the home.
	DatabaseManaged = "managed"
	// DatabaseExternal: DATABASE_URL names the server's PostgreSQL.
	DatabaseExternal = "external"
)

// StatusOK is Health's Status and Database when they are well.
const StatusOK = "ok"

// Health answers GET HealthPath. OpenRouterConfigured says whether the
// host-wide default OpenRouter key is stored (never the key); DatabaseKind,
// Home and LogsDir say where the state lives, so a person need not know the
// environment variables.
type Health struct {
	Status               string `json:"status"`
	Database             string `json:"database"`
	Version              string `json:"version"`
	OpenRouterConfigured bool   `json:"openrouter_configured"`
	DatabaseKind         string `json:"database_kind"`
	Home                 string `json:"home"`
	LogsDir              string `json:"logs_dir"`
}
