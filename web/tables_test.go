package web

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/guest/engine/tools"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
	"github.com/invisible-dots/invisible-dots/internal/eventtext"
)

// generatedTables is the client's copy of the Go tables it shows (the
// permissions with their words, risk and default, the config's bounds, and
// the events whose spend the usage route sums, the phases in which a task
// has ended, the labels a Task's Dot and asker are selected by):
// written from Go, so the words have one owner. The test fails when the
// file drifts; UPDATE_WEB_TABLES=1 writes it again.
const generatedTables = "src/lib/generated.ts"

func tablesSource() ([]byte, error) {
	type perm struct {
		Name        string `json:"name"`
		Label       string `json:"label"`
		Description string `json:"description"`
		Risk        string `json:"risk"`
		Default     string `json:"default"`
		// Tools are what an "Always allow" of it covers (the engine's tool
		// table, tools.ToolsOf), named on the approval card.
		Tools []string `json:"tools"`
	}
	perms := make([]perm, 0, len(protocol.Permissions))
	for _, p := range protocol.Permissions {
		perms = append(perms, perm{p.Name, p.Label, p.Description, string(p.Risk), string(p.Default), tools.ToolsOf(p.Name)})
	}
	dj, err := json.Marshal(protocol.DestructivePermissions)
	if err != nil {
		return nil, err
	}
	b := protocol.Bounds
	bounds := map[string]any{
		"cpu":               map[string]int{"min": b.CPU.Min, "max": b.CPU.Max, "default": b.CPU.Default},
		"memoryGiB":         map[string]int{"min": b.MemoryGiB.Min, "max": b.MemoryGiB.Max, "default": b.MemoryGiB.Default},
		"diskGiB":           map[string]int{"min": b.DiskGiB.Min, "max": b.DiskGiB.Max, "default": b.DiskGiB.Default},
		"idleTimeoutMin":    int(b.IdleTimeoutDefault.Minutes()),
		"maxStepsPerTask":   map[string]int{"min": b.MaxStepsPerTask.Min, "max": b.MaxStepsPerTask.Max, "default": b.MaxStepsPerTask.Default},
		"maxCostPerTaskUSD": map[string]float64{"min": b.MaxCostPerTaskUSD.Min, "max": b.MaxCostPerTaskUSD.Max, "default": b.MaxCostPerTaskUSD.Default},
	}
	pj, err := json.MarshalIndent(perms, "", "  ")
	if err != nil {
		return nil, err
	}
	bj, err := json.MarshalIndent(bounds, "", "  ")
	if err != nil {
		return nil, err
	}
	sj, err := json.Marshal(wire.SpendEventTypes)
	if err != nil {
		return nil, err
	}
	// Every phase the Task API admits, kept when Ended says so: the client's
	// history and the dispatcher agree on what is over.
	phases, err := taskPhases()
	if err != nil {
		return nil, err
	}
	var ended []dotsv1.TaskPhase
	for _, p := range phases {
		if p.Ended() {
			ended = append(ended, p)
		}
	}
	ej, err := json.Marshal(ended)
	if err != nil {
		return nil, err
	}
	wj, err := json.Marshal(wire.ChannelWarnings)
	if err != nil {
		return nil, err
	}
	cj, err := json.Marshal(wire.ChannelKindNames)
	if err != nil {
		return nil, err
	}
	// Every state the Channel API admits: the client words each one, and a
	// state added there does not compile in the client until it is worded.
	states, err := enumOf("../api/v1alpha1/channel_types.go", "ChannelState")
	if err != nil {
		return nil, err
	}
	csj, err := json.Marshal(states)
	if err != nil {
		return nil, err
	}
	// The channel routes' own error codes, which the client words the same way.
	codes := []string{wire.CodeInvalidCredentials, wire.CodeChannelUnreachable, wire.CodeAccountInUse, wire.CodeAlreadyExists, wire.CodeChannelOff}
	ccj, err := json.Marshal(codes)
	if err != nil {
		return nil, err
	}
	// The one-time permissions (a budget's, a namespace's spend) in words:
	// their cards offer no "always".
	oneTime := map[string]string{}
	for _, p := range protocol.OneTimePermissions {
		oneTime[p] = eventtext.PermissionPhrase(p)
	}
	otj, err := json.Marshal(oneTime)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	fmt.Fprintf(&out, "// Written by web/tables_test.go from guest/protocol (Permissions, Bounds, DestructivePermissions), the engine's tool table (ToolsOf), the Dots API (SpendEventTypes) the Task API (TaskPhase.Ended, DotLabel, RequestedByLabel) and the channels' names, warnings, states and error codes (ChannelKindNames, ChannelWarnings, ChannelState, wire.Code*); do not edit.\n")
	fmt.Fprintf(&out, "// UPDATE_WEB_TABLES=1 go test ./web writes it again.\n\n")
	fmt.Fprintf(&out, "export type Decision = 'allow' | 'ask' | 'deny';\n\n")
	fmt.Fprintf(&out, "export const PERMISSIONS: { name: string; label: string; description: string; risk: 'low' | 'medium' | 'high'; default: Decision; tools: string[] }[] = %s;\n\n", pj)
	fmt.Fprintf(&out, "/** The permissions every call of which an approval card marks destructive; a file write is destructive outside WORKSPACE_DIR (guest/protocol DestructiveCall). */\n")
	fmt.Fprintf(&out, "export const DESTRUCTIVE_PERMISSIONS: readonly string[] = %s;\n\n", dj)
	fmt.Fprintf(&out, "/** The permissions an approval of which answers one question, in words: no \"always\" (guest/protocol OneTimePermissions, eventtext.PermissionPhrase). */\n")
	fmt.Fprintf(&out, "export const ONE_TIME_PERMISSIONS: Record<string, string> = %s;\n", otj)
	fmt.Fprintf(&out, "/** The permission of a namespace's question for more spend in a day (protocol.SpendPermission). */\n")
	fmt.Fprintf(&out, "export const SPEND_PERMISSION = %q;\n\n", protocol.SpendPermission)
	fmt.Fprintf(&out, "/** Where the engine's relative paths start, and the Dot's home (\"~\"). */\n")
	fmt.Fprintf(&out, "export const WORKSPACE_DIR = %q;\nexport const DOT_HOME = %q;\n\n", protocol.DefaultWorkspace, protocol.DefaultDotHome)
	fmt.Fprintf(&out, "export const BOUNDS = %s as const;\n\n", bj)
	fmt.Fprintf(&out, "/** The events whose spent_usd the usage route sums: a Dot's spend changes on these only. */\n")
	fmt.Fprintf(&out, "export const SPEND_EVENT_TYPES: readonly string[] = %s;\n\n", sj)
	fmt.Fprintf(&out, "/** The phases in which a task has ended: nothing leads out of them (api/v1alpha1 TaskPhase.Ended). */\n")
	fmt.Fprintf(&out, "export const ENDED_TASK_PHASES = %s as const;\n\n", ej)
	fmt.Fprintf(&out, "export type EndedTaskPhase = (typeof ENDED_TASK_PHASES)[number];\n")
	fmt.Fprintf(&out, "\n/** The label every Task carries with its Dot's name, and the one a delegated Task carries with the asker's: a Dot's tasks, or its requests, are listed by selector (api/v1alpha1 DotLabel, RequestedByLabel). */\n")
	fmt.Fprintf(&out, "export const DOT_LABEL = %q;\nexport const REQUESTED_BY_LABEL = %q;\n", dotsv1.DotLabel, dotsv1.RequestedByLabel)
	fmt.Fprintf(&out, "\n/** How each messaging channel is named to people (wire.ChannelKindNames). */\n")
	fmt.Fprintf(&out, "export const CHANNEL_NAMES: Record<string, string> = %s;\n", cj)
	fmt.Fprintf(&out, "\n/** What a person is told where they link a channel of each kind (wire.ChannelWarnings). */\n")
	fmt.Fprintf(&out, "export const CHANNEL_WARNINGS: Record<string, string> = %s;\n", wj)
	fmt.Fprintf(&out, "\n/** Where a Channel's link can stand (api/v1alpha1 ChannelState). */\n")
	fmt.Fprintf(&out, "export const CHANNEL_STATES = %s as const;\n\n", csj)
	fmt.Fprintf(&out, "export type ChannelState = (typeof CHANNEL_STATES)[number];\n")
	fmt.Fprintf(&out, "\n/** The error codes of the channel routes (internal/dotsapi/wire). */\n")
	fmt.Fprintf(&out, "export const CHANNEL_ERROR_CODES = %s as const;\n\n", ccj)
	fmt.Fprintf(&out, "export type ChannelErrorCode = (typeof CHANNEL_ERROR_CODES)[number];\n")
	return out.Bytes(), nil
}

// taskPhases reads the phases a Task may have from the Enum marker on
// TaskPhase, the list the API server validates against, so a phase added
// there is asked about here too.
func taskPhases() ([]dotsv1.TaskPhase, error) {
	names, err := enumOf("../api/v1alpha1/task_types.go", "TaskPhase")
	if err != nil {
		return nil, err
	}
	phases := make([]dotsv1.TaskPhase, 0, len(names))
	for _, p := range names {
		phases = append(phases, dotsv1.TaskPhase(p))
	}
	return phases, nil
}

// enumOf reads the values of a string type from the Enum marker right
// above its declaration in typesFile: the list the API server validates
// against.
func enumOf(typesFile, typeName string) ([]string, error) {
	const marker = "// +kubebuilder:validation:Enum="
	src, err := os.ReadFile(typesFile)
	if err != nil {
		return nil, err
	}
	var last string
	for line := range strings.Lines(string(src)) {
		line = strings.TrimSpace(line)
		if line == "type "+typeName+" string" {
			enum, ok := strings.CutPrefix(last, marker)
			if !ok {
				return nil, fmt.Errorf("%s: no Enum marker right above type %s", typesFile, typeName)
			}
			return strings.Split(enum, ";"), nil
		}
		last = line
	}
	return nil, fmt.Errorf("%s: no type %s", typesFile, typeName)
}

func TestGeneratedTablesAreGoTables(t *testing.T) {
	want, err := tablesSource()
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv("UPDATE_WEB_TABLES") == "1" {
		if err := os.WriteFile(generatedTables, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(generatedTables)
	if err != nil {
		t.Fatalf("%v (UPDATE_WEB_TABLES=1 go test ./web writes it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from guest/protocol's tables: run UPDATE_WEB_TABLES=1 go test ./web", generatedTables)
	}
}
