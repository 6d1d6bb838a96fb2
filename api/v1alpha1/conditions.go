package v1alpha1

// Condition types and their reasons, one block per type (cluster-api style).
// Every condition is a metav1.Condition with ObservedGeneration set.

// ReadyCondition is the summary a person reads first: for a Dot, its computer
// runs and its configuration is applied; for a Computer, QEMU runs and
// dot-agentd answers GET /v1/health through the proven channel.
const ReadyCondition = "Ready"

const (
	// ReadyReason: everything Ready summarizes holds.
	ReadyReason = "Ready"
	// NotReadyReason: at least one part is not there yet; the message says which.
	NotReadyReason = "NotReady"
	// DeletingReason: the object is being deleted.
	DeletingReason = "Deleting"
)

// ComputerReadyCondition reflects the Dot's Computer.
const ComputerReadyCondition = "ComputerReady"

const (
	// ComputerCreatedReason: the Computer exists and is being provisioned.
	ComputerCreatedReason = "ComputerCreated"
	// ComputerRunningReason: the Computer is Ready.
	ComputerRunningReason = "ComputerRunning"
	// ComputerNotRunningReason: the Computer exists and is not Ready.
	ComputerNotRunningReason = "ComputerNotRunning"
	// ComputerConflictReason: a Computer of the Dot's name exists that the Dot
	// does not own; nothing is changed until a person resolves it.
	ComputerConflictReason = "ComputerConflict"
)

// ConfigAppliedCondition says whether the guest took the Dot's configuration.
const ConfigAppliedCondition = "ConfigApplied"

const (
	// ConfigPendingReason: the configuration has not reached the guest yet.
	ConfigPendingReason = "Pending"
	// ConfigAppliedReason: the guest accepted this generation's configuration.
	ConfigAppliedReason = "Applied"
)

// ProvisionedCondition is the Computer's: a host agent has taken it and made
// its disk and seed.
const ProvisionedCondition = "Provisioned"

const (
	// NoHostAgentReason: no host agent runs in this control plane, so nothing
	// can create the VM yet. This is the truth until a host agent takes it.
	NoHostAgentReason = "NoHostAgent"
	// ProvisionedReason: the VM's files exist on its host.
	ProvisionedReason = "Provisioned"
	// ProvisionFailedReason: making the VM's files failed; the message says why.
	ProvisionFailedReason = "ProvisionFailed"
)

// Reasons of a Computer's Ready condition when it is False (the Computer
// reconciler's; the message says what to do).
const (
	// VMStartingReason: QEMU runs and the guest has not answered
	// GET /v1/health through the proven channel yet.
	VMStartingReason = "Starting"
	// VMStoppedReason: no QEMU runs for the Computer; stopReason says why.
	VMStoppedReason = "Stopped"
	// GuestNotAnsweringReason: QEMU runs but its guest stopped answering.
	GuestNotAnsweringReason = "GuestNotAnswering"
	// VMErrorReason: the host found something it cannot prove is this VM's
	// QEMU; nothing is started, stopped or destroyed until a person looks.
	VMErrorReason = "VMError"
	// StartFailedReason: the last start failed; startFailure holds the
	// backoff.
	StartFailedReason = "StartFailed"
	// ProvisionPendingReason (Provisioned False): the VM's disk is made at
	// its first start, which has not happened yet.
	ProvisionPendingReason = "Pending"
)
