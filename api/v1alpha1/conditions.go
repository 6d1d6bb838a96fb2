package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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

// The READY procedure (ref 9.3), one condition per step, written by the guest
// link of the host agent that runs the Dot's Computer: KeyPushed, then
// ConfigApplied, then AgentReady. A step that waits for an earlier one is
// False with WaitingReason; every step is False with ComputerNotReadyReason
// while the Computer is not Ready. A failed push says its route, status and
// error code, never what the guest answered (ref 4.3).

// KeyPushedCondition says whether the guest holds the OpenRouter key and the
// MCP secrets (POST /v1/agent/secrets).
const KeyPushedCondition = "KeyPushed"

const (
	// KeyPushedReason: the guest took the key and the MCP secrets; the
	// message names the Secret the key came from.
	KeyPushedReason = "Pushed"
	// NoKeyReason: no key is stored, neither the Dot's own nor the host-wide
	// default; the message names the command that stores one.
	NoKeyReason = "NoKey"
	// KeyUnusableReason: a stored key or MCP secret breaks the rule of ref
	// 4.3, or its Secret cannot be read; the message says which and never
	// holds a value.
	KeyUnusableReason = "KeyUnusable"
)

// ConfigAppliedCondition says whether the guest took the Dot's configuration
// (PUT /v1/agent/config); its message names the generation applied.
const ConfigAppliedCondition = "ConfigApplied"

const (
	// ConfigPendingReason: the configuration has not reached the guest yet.
	ConfigPendingReason = "Pending"
	// ConfigAppliedReason: the guest accepted this generation's configuration.
	ConfigAppliedReason = "Applied"
	// ConfigInvalidReason: the Dot's spec does not make a runtime
	// configuration the guest would accept; the message says why.
	ConfigInvalidReason = "Invalid"
)

// AgentReadyCondition says whether the engine in the guest reports itself
// ready (GET /v1/agent/health: status ok, the key configured, its own checks
// passing).
const AgentReadyCondition = "AgentReady"

const (
	// AgentReadyReason: the engine is ready.
	AgentReadyReason = "Ready"
	// AgentStartingReason: the engine answers and says it is starting, or a
	// check of its own does not pass; the message names the check.
	AgentStartingReason = "AgentStarting"
	// AgentNotAnsweringReason: the engine's health did not answer; the
	// message says the route, status and code.
	AgentNotAnsweringReason = "AgentNotAnswering"
)

// Reasons shared by the three steps of the READY procedure.
const (
	// ComputerNotReadyReason: the Computer is not Ready, so nothing can
	// reach its guest; everything is pushed again when it is.
	ComputerNotReadyReason = "ComputerNotReady"
	// WaitingReason: an earlier step has not succeeded yet.
	WaitingReason = "Waiting"
	// PushFailedReason: the guest did not take a push; the message says the
	// route, the status and the error code.
	PushFailedReason = "PushFailed"
)

// Where the OpenRouter key is kept (ref 4.3; `invisible-dots secret
// openrouter` stores it). A Dot's own Secret (spec.secretRef) wins over the
// host-wide default.
const (
	// OpenRouterKeySecretKey is the key of the OpenRouter key in either
	// Secret.
	OpenRouterKeySecretKey = "openrouter-key"
	// DefaultKeySecretName is the host-wide default key's Secret, in
	// SystemNamespace: the key of every Dot without one of its own.
	DefaultKeySecretName = "openrouter"
	// MCPSecretKeyPrefix starts the key of an MCP secret in a Dot's Secret:
	// mcp.<server>.<NAME>.
	MCPSecretKeyPrefix = "mcp."
)

// MCPSecretKey is the key of an MCP server's secret in a Dot's Secret.
func MCPSecretKey(server, name string) string { return MCPSecretKeyPrefix + server + "." + name }

// SecretsChangedAnnotation is set on a Dot, to the new resourceVersion of
// its Secret, each time the control plane writes that Secret (an MCP secret
// or the Dot's own key). A host agent may not watch Secrets, so this is how
// the guest link of the Dot's host hears of the change at once and pushes
// the secrets to a running guest, instead of at its next poll. It holds no
// part of a secret.
const SecretsChangedAnnotation = "dots.invisible.dev/secrets-changed"

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
	// DiskFullReason: the last start could not write the VM's files (its
	// overlay, seed or records) for want of space on its host's disk; the
	// message names the write and what to do. Nothing is left half-written,
	// and the start is tried again until there is room. It is also the
	// reason of a Host's DiskPressure when a write on it failed so.
	DiskFullReason = "DiskFull"
	// ProvisionPendingReason (Provisioned False): the VM's disk is made at
	// its first start, which has not happened yet.
	ProvisionPendingReason = "Pending"
)

// RuntimeCurrentCondition is a running Computer's: whether its VM runs the
// newest runtime ISO registered on its host (ref 3.3: a new version of our
// code is a new ISO and a VM restart). A Computer starts on the newest one;
// one that runs an older one says so until it is restarted (`invisible-dots
// computer reboot`). It is set only while the VM runs.
const RuntimeCurrentCondition = "RuntimeCurrent"

const (
	// RuntimeCurrentReason (True): the VM runs the newest runtime ISO.
	RuntimeCurrentReason = "Current"
	// RuntimePinnedReason (True): spec.runtimeImage names the version the VM
	// runs; newer ones are not taken.
	RuntimePinnedReason = "Pinned"
	// RuntimeRestartPendingReason (False): a newer runtime ISO is registered
	// and the VM takes it at its next start; the message says which and how
	// to apply it now.
	RuntimeRestartPendingReason = "RestartPending"
)

// Reasons of a Computer's Ready condition set from outside its host.
const (
	// HostUnreachableReason (Ready Unknown): the Lease of the Computer's host
	// has not been renewed for HostLeaseDuration seconds. Nothing is moved
	// or deleted; the conditions recover when the host agent comes back.
	HostUnreachableReason = "HostUnreachable"
	// VMStoppingReason (Ready False): the guest was asked to power off;
	// stopDeadline is when it is killed if it has not.
	VMStoppingReason = "Stopping"
)

// PlacedCondition is the Computer's: a host was chosen for it
// (spec.nodeName is set).
const PlacedCondition = "Placed"

const (
	// PlacedReason: spec.nodeName names the Computer's host.
	PlacedReason = "Placed"
	// NoHostFitsReason: no Ready host has the images and the room; the
	// message says what each host lacks. The Computer stays PROVISIONING.
	NoHostFitsReason = "NoHostFits"
)

// DotBoundCondition is a Task's and an Approval's: their Dot exists and
// owns them.
const DotBoundCondition = "DotBound"

const (
	// DotBoundReason: the Dot of spec.dotName owns the object.
	DotBoundReason = "Bound"
	// DotMissingReason: there is no Dot of spec.dotName; the object waits.
	DotMissingReason = "DotMissing"
)

// A Host's conditions. Ready is written by its host agent and turned
// Unknown by the control plane when the host's Lease lapses.
const (
	// DiskPressureCondition: the home filesystem's free space is under what
	// one more default Computer needs.
	DiskPressureCondition = "DiskPressure"
	// MemoryPressureCondition: the memory not promised to Computers is
	// under what one more default Computer needs.
	MemoryPressureCondition = "MemoryPressure"
)

const (
	// HostReadyReason (Ready True): the agent runs and heartbeats, and QEMU
	// is usable.
	HostReadyReason = "AgentReady"
	// NoQEMUReason (Ready False): the agent runs but this host cannot run
	// VMs; the message says what `invisible-dots doctor` found.
	NoQEMUReason = "CannotRunVMs"
	// PressureReason and NoPressureReason are the two reasons of the
	// pressure conditions; DiskPressure is True with DiskFullReason while a
	// write in the home's filesystem has been refused for want of space and
	// none has succeeded since (nor has space returned).
	PressureReason   = "UnderPressure"
	NoPressureReason = "Enough"
)

// Labels set on the objects the controllers make.
const (
	// DotLabel is set on the objects made for a Dot, with the Dot's name.
	DotLabel = "dots.invisible.dev/dot"
	// ComputerLabel is set on the objects made for a Computer, with its name.
	ComputerLabel = "dots.invisible.dev/computer"
)

// Finalizers.
const (
	// DotFinalizer holds a Dot until its Computer (and with it the VM and
	// its disk) is gone.
	DotFinalizer = "dots.invisible.dev/computer"
	// ComputerFinalizer holds a Computer until its host agent destroyed its
	// VM and files (or a person deleted the Host: the disk stays).
	ComputerFinalizer = "dots.invisible.dev/vm"
)

// Each kind's conditions, for the one status writer (internal/patch).
func (d *Dot) GetConditions() []metav1.Condition       { return d.Status.Conditions }
func (d *Dot) SetConditions(c []metav1.Condition)      { d.Status.Conditions = c }
func (c *Computer) GetConditions() []metav1.Condition  { return c.Status.Conditions }
func (c *Computer) SetConditions(v []metav1.Condition) { c.Status.Conditions = v }
func (c *Channel) GetConditions() []metav1.Condition   { return c.Status.Conditions }
func (c *Channel) SetConditions(v []metav1.Condition)  { c.Status.Conditions = v }
func (t *Task) GetConditions() []metav1.Condition      { return t.Status.Conditions }
func (t *Task) SetConditions(c []metav1.Condition)     { t.Status.Conditions = c }
func (a *Approval) GetConditions() []metav1.Condition  { return a.Status.Conditions }
func (a *Approval) SetConditions(c []metav1.Condition) { a.Status.Conditions = c }
func (h *Host) GetConditions() []metav1.Condition      { return h.Status.Conditions }
func (h *Host) SetConditions(c []metav1.Condition)     { h.Status.Conditions = c }
