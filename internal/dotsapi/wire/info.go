package wire

// The server's own routes: its health and the doctor of its host (ref 9.6).

// HealthPath is the server's health (GET: Health), for every authenticated
// user.
const HealthPath = Prefix + "health"

// DoctorPath is the doctor's report of the host the server runs on (GET:
// the report of `invisible-dots doctor --json`, hostagent/doctor.Report),
// for administrators and those bound to the ClusterRole dots-doctor: it
// runs QEMU's accelerator probe on the server's machine.
const DoctorPath = Prefix + "doctor"

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
