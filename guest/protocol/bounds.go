package protocol

import "time"

// Bounds is the reference's CONFIG_BOUNDS (ref 7): the ranges and defaults of
// every number in a Dot's configuration. The CRD's OpenAPI markers repeat
// these numbers (markers cannot name a Go constant); a test in api/v1alpha1
// reads the generated CRD back and fails when the two differ.
var Bounds = struct {
	CPU                IntRange
	MemoryGiB          IntRange
	DiskGiB            IntRange
	IdleTimeoutDefault time.Duration
	MaxStepsPerTask    IntRange
	MaxCostPerTaskUSD  FloatRange
	MCPTimeoutS        IntRange
	MCPStartupTimeoutS IntRange
}{
	CPU:                IntRange{Min: 1, Max: 16, Default: 2},
	MemoryGiB:          IntRange{Min: 2, Max: 64, Default: 4},
	DiskGiB:            IntRange{Min: 20, Max: 1024, Default: 40},
	IdleTimeoutDefault: 15 * time.Minute,
	MaxStepsPerTask:    IntRange{Min: 1, Max: 1000, Default: 60},
	MaxCostPerTaskUSD:  FloatRange{Min: 0.01, Max: 100, Default: 1.00},
	MCPTimeoutS:        IntRange{Min: 1, Max: 600, Default: 120},
	MCPStartupTimeoutS: IntRange{Min: 1, Max: 600, Default: 60},
}

// IntRange is an inclusive integer range with its default.
type IntRange struct{ Min, Max, Default int }

// Contains reports whether v lies in the range.
func (r IntRange) Contains(v int) bool { return v >= r.Min && v <= r.Max }

// FloatRange is an inclusive range of a decimal setting with its default.
type FloatRange struct{ Min, Max, Default float64 }

// Contains reports whether v lies in the range.
func (r FloatRange) Contains(v float64) bool { return v >= r.Min && v <= r.Max }

// NamePattern is the rule for a Dot's name (ref 7): [a-z0-9-], 1..40.
const NamePattern = `^[a-z0-9-]{1,40}$`

// MCPServerNamePattern is MCP_SERVER_NAME_PATTERN (ref 7): [a-z0-9-], 1..32,
// starting with a letter or a digit. It holds no "_" because a server's name
// is the prefix of its tools as the model sees them (mcp__<server>__<tool>).
const MCPServerNamePattern = `^[a-z0-9][a-z0-9-]{0,31}$`

// ModelRoles are the per-role models a Dot may name (ref 7 MODEL_ROLES).
var ModelRoles = []string{"summary"}

// OpenRouterKeyPattern is OPENROUTER_KEY_PATTERN (ref 4.3): printable ASCII
// without spaces, so the key can travel in a header.
const OpenRouterKeyPattern = `^[\x21-\x7e]+$`

// OpenRouterKeyRule is OPENROUTER_KEY_RULE, the sentence shown when a key
// breaks the pattern. It never contains the key.
const OpenRouterKeyRule = "the OpenRouter key must be printable ASCII without spaces"

// MCPSecretPattern is MCP_SECRET_PATTERN (ref 4.3): printable ASCII, a space
// allowed ("Bearer <token>").
const MCPSecretPattern = `^[\x20-\x7e]+$`

// MCPSecretRule is MCP_SECRET_RULE.
const MCPSecretRule = "an MCP secret must be printable ASCII (spaces allowed)"
