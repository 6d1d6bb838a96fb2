package v1alpha1

import (
	"slices"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ModelProvider is where a Dot's models come from. OpenRouter is the only one.
// +kubebuilder:validation:Enum=openrouter
type ModelProvider string

// OpenRouter is the one model provider.
const OpenRouter ModelProvider = "openrouter"

// ModelRef names the model a Dot thinks with.
type ModelRef struct {
	// provider is where the model is served; only openrouter is accepted.
	// +kubebuilder:default=openrouter
	// +optional
	Provider ModelProvider `json:"provider,omitempty"`

	// id is an OpenRouter model id, such as z-ai/glm-5.3-flash.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=200
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9._:/-]+$`
	// +required
	ID string `json:"id"`

	// reasoning is the reasoning effort asked of the model on every request
	// (OpenRouter's reasoning.effort; none turns it off); absent is the
	// model's own default.
	// +optional
	Reasoning ReasoningEffort `json:"reasoning,omitempty"`
}

// ReasoningEffort is how hard a Dot's model reasons (guest/protocol's
// ReasoningEfforts).
// +kubebuilder:validation:Enum=none;low;medium;high
type ReasoningEffort string

// Decision is what a Dot's configuration says about one permission.
// +kubebuilder:validation:Enum=allow;ask;deny
type Decision string

// DotComputer is the size of a Dot's computer and when it sleeps. Memory and
// disk are pointers so that a typed client leaving them out gets the defaults
// (a zero Quantity would be sent as "0").
// +kubebuilder:validation:XValidation:rule="!has(self.memory) || (quantity(string(self.memory)).compareTo(quantity('2Gi')) >= 0 && quantity(string(self.memory)).compareTo(quantity('64Gi')) <= 0)",message="memory must be between 2Gi and 64Gi",fieldPath=".memory",reason=FieldValueInvalid
// +kubebuilder:validation:XValidation:rule="!has(self.disk) || (quantity(string(self.disk)).compareTo(quantity('20Gi')) >= 0 && quantity(string(self.disk)).compareTo(quantity('1024Gi')) <= 0)",message="disk must be between 20Gi and 1024Gi",fieldPath=".disk",reason=FieldValueInvalid
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.disk) || !has(self.disk) || quantity(string(self.disk)).compareTo(quantity(string(oldSelf.disk))) >= 0",messageExpression="'disks only grow: ' + string(self.disk) + ' is smaller than the ' + string(oldSelf.disk) + ' the computer has (what is on a disk stays on it): keep ' + string(oldSelf.disk) + ' or set more'",fieldPath=".disk",reason=FieldValueForbidden
type DotComputer struct {
	// cpu is the number of virtual CPUs, 1 to 16.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=16
	// +kubebuilder:default=2
	// +optional
	CPU int32 `json:"cpu,omitempty"`

	// memory is the guest's memory, 2Gi to 64Gi.
	// +kubebuilder:default="4Gi"
	// +optional
	Memory *resource.Quantity `json:"memory,omitempty"`

	// disk is the size of the guest's disk, 20Gi to 1024Gi. It can grow, never shrink.
	// +kubebuilder:default="40Gi"
	// +optional
	Disk *resource.Quantity `json:"disk,omitempty"`

	// idleTimeout is how long the computer runs with nothing to do before it
	// sleeps; 0 means never.
	// +kubebuilder:default="15m"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="idleTimeout cannot be negative"
	// +optional
	IdleTimeout *metav1.Duration `json:"idleTimeout,omitempty"`

	// host pins the computer to the Host of this name; empty lets placement
	// choose. It applies when the Computer is made: a computer never moves.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`
	// +optional
	Host string `json:"host,omitempty"`
}

// DotLimits bounds the work of one task or one chat turn.
type DotLimits struct {
	// maxStepsPerTask is how many model turns a task may take before it fails.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	// +kubebuilder:default=60
	// +optional
	MaxStepsPerTask int32 `json:"maxStepsPerTask,omitempty"`

	// maxCostPerTaskUSD caps the model spend, in US dollars, of a task or of the
	// chat between two answers, 0.01 to 100. The last request may exceed it.
	// +kubebuilder:validation:Minimum=0.01
	// +kubebuilder:validation:Maximum=100
	// +kubebuilder:default=1
	// +optional
	MaxCostPerTaskUSD float64 `json:"maxCostPerTaskUSD,omitempty"`
}

// MCPServer is an MCP server whose tools the Dot may use: a command run on
// its computer, or a URL. Values of the names listed in secrets are kept in
// the Dot's Secret, never here.
// +kubebuilder:validation:XValidation:rule="has(self.command) != has(self.url)",message="an MCP server has exactly one of command or url"
// +kubebuilder:validation:XValidation:rule="has(self.command) || (!has(self.args) && !has(self.env))",message="args and env belong to a command server; a url server takes headers"
// +kubebuilder:validation:XValidation:rule="has(self.url) || !has(self.headers)",message="headers belong to a url server; a command server takes env"
// +kubebuilder:validation:XValidation:rule="!has(self.secrets) || !has(self.env) || self.secrets.all(s, !(s in self.env))",message="a secret cannot also be written as a value in env"
// +kubebuilder:validation:XValidation:rule="!has(self.secrets) || !has(self.headers) || self.secrets.all(s, !(s in self.headers))",message="a secret cannot also be written as a value in headers"
type MCPServer struct {
	// name is the server's name and the prefix of its tools: [a-z0-9-], 1 to
	// 32, starting with a letter or a digit.
	// +kubebuilder:validation:Pattern=`^[a-z0-9][a-z0-9-]{0,31}$`
	// +kubebuilder:validation:MaxLength=32
	// +required
	Name string `json:"name"`

	// command runs the server on the Dot's computer, as the dot user, in its home.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	// +optional
	Command string `json:"command,omitempty"`

	// args are the command's arguments.
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	// +optional
	Args []string `json:"args,omitempty"`

	// env is environment written in the configuration for the command.
	// +kubebuilder:validation:MaxProperties=64
	// +optional
	Env map[string]string `json:"env,omitempty"`

	// url is a streamable HTTP endpoint, or SSE for a URL ending in /sse.
	// +kubebuilder:validation:Pattern=`^https?://`
	// +kubebuilder:validation:MaxLength=2048
	// +optional
	URL string `json:"url,omitempty"`

	// headers are HTTP headers sent to a url server.
	// +kubebuilder:validation:MaxProperties=64
	// +optional
	Headers map[string]string `json:"headers,omitempty"`

	// secrets names the env variables or headers whose values are secrets,
	// kept in the Dot's Secret under the key mcp.<server>.<NAME>.
	// +kubebuilder:validation:MaxItems=32
	// +listType=set
	// +optional
	Secrets []string `json:"secrets,omitempty"`

	// timeoutSeconds is the longest one call may take, 1 to 600.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=600
	// +optional
	TimeoutSeconds *int32 `json:"timeoutSeconds,omitempty"`

	// startupTimeoutSeconds is the longest the server may take to start, 1 to 600.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=600
	// +optional
	StartupTimeoutSeconds *int32 `json:"startupTimeoutSeconds,omitempty"`

	// trusted says the server's results are the owner's own data: reading
	// them does not make a turn tainted by untrusted input (untrustedInput).
	// +optional
	Trusted bool `json:"trusted,omitempty"`
}

// SecretReference names a Secret in the Dot's namespace. It holds the
// OpenRouter key under "openrouter-key" and MCP secrets under
// "mcp.<server>.<NAME>".
type SecretReference struct {
	// name of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`
}

// DotSpec is a Dot's configuration (ref 7) in Kubernetes form.
// +kubebuilder:validation:XValidation:rule="!has(self.permissions) || self.permissions.all(k, !k.startsWith('mcp.') || k == 'mcp.servers.add' || (has(self.mcpServers) && self.mcpServers.exists(s, k == 'mcp.' + s.name)))",messageExpression="'permission ' + self.permissions.filter(k, !(!k.startsWith('mcp.') || k == 'mcp.servers.add' || (has(self.mcpServers) && self.mcpServers.exists(s, k == 'mcp.' + s.name))))[0] + ' names no server declared in mcpServers'",fieldPath=".permissions",reason=FieldValueInvalid
type DotSpec struct {
	// instructions say how the Dot should work; they go into its system prompt.
	// +kubebuilder:validation:MaxLength=20000
	// +kubebuilder:validation:XValidation:rule="!self.contains('\\u0000')",message="holds a NUL character (U+0000), which cannot be stored: remove it"
	// +optional
	Instructions string `json:"instructions,omitempty"`

	// model is the model the Dot thinks with.
	// +required
	Model ModelRef `json:"model"`

	// models are per-role models, by role. The one role is summary, which
	// writes the summary when the thread outgrows the model's window; without
	// it the Dot's own model writes it.
	// +kubebuilder:validation:MaxProperties=8
	// +kubebuilder:validation:XValidation:rule="self.all(k, k == 'summary')",messageExpression="'unknown model role \"' + self.filter(k, k != 'summary')[0] + '\" (the roles are: summary)'"
	// +optional
	Models map[string]string `json:"models,omitempty"`

	// computer is the size of the Dot's computer.
	// +kubebuilder:default={}
	// +optional
	Computer DotComputer `json:"computer,omitempty"`

	// permissions map a permission name to allow, ask or deny. Permissions not
	// listed take their defaults.
	// +kubebuilder:validation:MaxProperties=64
	// +kubebuilder:validation:XValidation:rule="self.all(k, k in ['computer.exec','computer.screenshot','files.read','files.write','automations','browser.identity.list','browser.identity.create','browser.identity.delete','browser.identity.launch','browser.identity.close','browser.navigate','browser.read','browser.act','mcp.servers.add','dots.delegate'] || k.startsWith('mcp.'))",messageExpression="'unknown permission ' + self.filter(k, !(k in ['computer.exec','computer.screenshot','files.read','files.write','automations','browser.identity.list','browser.identity.create','browser.identity.delete','browser.identity.launch','browser.identity.close','browser.navigate','browser.read','browser.act','mcp.servers.add','dots.delegate'] || k.startsWith('mcp.')))[0] + ' (the permissions are those of the tools, and mcp.<server> for a server in mcpServers)'",reason=FieldValueInvalid
	// +optional
	Permissions map[string]Decision `json:"permissions,omitempty"`

	// limits bound the work of a task or a chat turn.
	// +kubebuilder:default={}
	// +optional
	Limits DotLimits `json:"limits,omitempty"`

	// mcpServers are the MCP servers whose tools the Dot may use, by name.
	// +kubebuilder:validation:MaxItems=32
	// +listType=map
	// +listMapKey=name
	// +optional
	MCPServers []MCPServer `json:"mcpServers,omitempty"`

	// secretRef names the Secret with the Dot's OpenRouter key and MCP secrets.
	// +optional
	SecretRef *SecretReference `json:"secretRef,omitempty"`

	// delegation says which Dots of the namespace this Dot may ask to do a
	// task (its delegate_task tool) and which may ask it. A request needs
	// both sides: the asker's canAsk names the receiver and the receiver's
	// acceptsFrom names the asker.
	// +optional
	Delegation *DotDelegation `json:"delegation,omitempty"`

	// untrustedInput is the guardrail of untrusted input: from the moment a
	// turn reads a page or a screenshot, a file under downloads/ (a file tool,
	// or a command that names it), a command's fetch from the network (curl,
	// wget), an MCP server's result (unless the server is trusted), a
	// webhook's payload or another Dot's request, the permissions under ask
	// are asked even where
	// they are allow, and the approval says what was read. Absent, ask is
	// every permission that writes, executes, sends or spends, and mcp.*.
	// +optional
	UntrustedInput *DotUntrustedInput `json:"untrustedInput,omitempty"`

	// allowUntil is when an allow given for a while ends, by permission (an
	// approval's "always" for an hour or until the end of the day): from then
	// on the permission is asked again.
	// +kubebuilder:validation:MaxProperties=64
	// +kubebuilder:validation:XValidation:rule="self.all(k, k in ['computer.exec','computer.screenshot','files.read','files.write','automations','browser.identity.list','browser.identity.create','browser.identity.delete','browser.identity.launch','browser.identity.close','browser.navigate','browser.read','browser.act','mcp.servers.add','dots.delegate'] || k.startsWith('mcp.'))",message="allowUntil names an unknown permission"
	// +optional
	AllowUntil map[string]metav1.Time `json:"allowUntil,omitempty"`
}

// DotUntrustedInput lists the permissions asked while a turn is tainted by
// untrusted input.
type DotUntrustedInput struct {
	// ask are permission names, or mcp.* for every MCP server's.
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:XValidation:rule="self.all(k, k in ['computer.exec','computer.screenshot','files.read','files.write','automations','browser.identity.list','browser.identity.create','browser.identity.delete','browser.identity.launch','browser.identity.close','browser.navigate','browser.read','browser.act','mcp.servers.add','dots.delegate'] || k.startsWith('mcp.'))",message="untrustedInput.ask names an unknown permission (the permissions are those of the tools, mcp.<server>, and mcp.*)"
	// +listType=set
	// +optional
	Ask []string `json:"ask"`
}

// DotDelegation is a Dot's side of delegation with consent: whom it may ask,
// whom it accepts requests from, by Dot name in its own namespace. Taking a
// name out of either list cancels the open requests of that pair.
type DotDelegation struct {
	// canAsk names the Dots this Dot may ask to do a task. Its delegate_task
	// tool is offered only when the list names one.
	// +kubebuilder:validation:MaxItems=50
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9-]{1,40}$`
	// +kubebuilder:validation:items:MaxLength=40
	// +listType=set
	// +optional
	CanAsk []string `json:"canAsk,omitempty"`

	// acceptsFrom names the Dots whose requests this Dot takes.
	// +kubebuilder:validation:MaxItems=50
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9-]{1,40}$`
	// +kubebuilder:validation:items:MaxLength=40
	// +listType=set
	// +optional
	AcceptsFrom []string `json:"acceptsFrom,omitempty"`
}

// MaxDelegationNames is the most Dots canAsk or acceptsFrom names (the
// markers above repeat it).
const MaxDelegationNames = 50

// CanAskDot says whether the spec lets this Dot ask the Dot named receiver.
func (s DotSpec) CanAskDot(receiver string) bool {
	return s.Delegation != nil && slices.Contains(s.Delegation.CanAsk, receiver)
}

// AcceptsFromDot says whether the spec lets the Dot named asker ask this one.
func (s DotSpec) AcceptsFromDot(asker string) bool {
	return s.Delegation != nil && slices.Contains(s.Delegation.AcceptsFrom, asker)
}

// DotPhase is the one-word state of a Dot (ref 9.3).
// +kubebuilder:validation:Enum=CREATING;READY;IDLE;RUNNING;WAITING_APPROVAL;ERROR
type DotPhase string

const (
	DotCreating        DotPhase = "CREATING"
	DotReady           DotPhase = "READY"
	DotIdle            DotPhase = "IDLE"
	DotRunning         DotPhase = "RUNNING"
	DotWaitingApproval DotPhase = "WAITING_APPROVAL"
	DotError           DotPhase = "ERROR"
)

// DotStatus is what the control plane observed of a Dot.
type DotStatus struct {
	// phase is the Dot's state in one word.
	// +optional
	Phase DotPhase `json:"phase,omitempty"`

	// computerState is the state of the Dot's Computer.
	// +optional
	ComputerState ComputerState `json:"computerState,omitempty"`

	// agentState is the engine's last reported state (IDLE, THINKING, ...).
	// +optional
	AgentState string `json:"agentState,omitempty"`

	// currentTask is the name of the Task the Dot works on.
	// +optional
	CurrentTask string `json:"currentTask,omitempty"`

	// pendingApprovals counts the Dot's Approvals waiting for a decision.
	// +optional
	PendingApprovals int32 `json:"pendingApprovals,omitempty"`

	// lastActivityTime is when the Dot last did something: the newest event
	// of its log but those of a change made to it, its computer or its
	// channels (a spec change, a start).
	// +optional
	LastActivityTime *metav1.Time `json:"lastActivityTime,omitempty"`

	// error says what is wrong when phase is ERROR.
	// +optional
	Error string `json:"error,omitempty"`

	// observedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions: Ready, ComputerReady, and the READY procedure's KeyPushed,
	// ConfigApplied and AgentReady.
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Dot is a persistent AI agent that owns a computer.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=dot,categories=invisible-dots
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Model",type=string,JSONPath=`.spec.model.id`
// +kubebuilder:printcolumn:name="Computer",type=string,JSONPath=`.status.computerState`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Task",type=string,JSONPath=`.status.currentTask`,priority=10
// +kubebuilder:printcolumn:name="Approvals",type=integer,JSONPath=`.status.pendingApprovals`,priority=10
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z0-9-]{1,40}$')",message="a Dot's name is 1 to 40 characters of a-z, 0-9 and -"
type Dot struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec DotSpec `json:"spec"`
	// +optional
	Status DotStatus `json:"status,omitempty"`
}

// DotList is a list of Dots.
// +kubebuilder:object:root=true
type DotList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Dot `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Dot{}, &DotList{})
}
