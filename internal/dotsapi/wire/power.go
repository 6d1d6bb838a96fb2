package wire

// The power of a Dot's computer, answered by the API as KubeVirt answers its
// start, stop and restart subresources: the client names the action, the
// server applies the Computer's power rule (api/v1alpha1 computer_power.go)
// and writes the Computer, so no client holds the rule or its annotations.

// The actions a ComputerPowerPath names.
const (
	// PowerStart starts the computer once, lifting a person's stop.
	PowerStart = "start"
	// PowerStop is a person's stop (runStrategy Halted).
	PowerStop = "stop"
	// PowerReboot stops and starts it once; refused while a person's stop
	// holds (409 CodeComputerHalted).
	PowerReboot = "reboot"
)

// Error codes of the power routes.
const (
	// CodeComputerHalted: a reboot asked of a computer a person stopped
	// (runStrategy Halted); start it instead (409).
	CodeComputerHalted = "computer_halted"
	// CodeComputerChanged: the Computer was written by others between every
	// read and write the server tried (its status is written often); look
	// at its state and ask again (409).
	CodeComputerChanged = "computer_changed"
)

// MaxComputerPowerBody is the largest body of POST ComputerPowerPath, which
// takes none but an empty JSON object.
const MaxComputerPowerBody = 1 << 10

// ComputerPowerPath is where the Dot namespace/dot's computer is started,
// stopped or rebooted (POST, no body): action is PowerStart, PowerStop or
// PowerReboot.
func ComputerPowerPath(namespace, dot, action string) string {
	return dotPath(namespace, dot) + "/computer/" + action
}

// ComputerPowered answers POST ComputerPowerPath: the Computer as the action
// left it. The Computer's reconciler does the work; its status says when
// (kubectl get computer NAME -w).
type ComputerPowered struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Action    string `json:"action"`
	// RunStrategy is the Computer's spec.runStrategy now.
	RunStrategy string `json:"run_strategy"`
	// RequestedAt is the time a start or reboot was requested at (RFC 3339,
	// the value of the request's annotation); empty for a stop.
	RequestedAt string `json:"requested_at,omitempty"`
}
