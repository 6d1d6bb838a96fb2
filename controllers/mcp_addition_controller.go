package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
	"github.com/invisible-dots/invisible-dots/internal/lifecycle"
	"github.com/invisible-dots/invisible-dots/internal/store"
)

// MCPAdditionControllerName names the reconciler of the MCP servers a Dot
// adds itself.
const MCPAdditionControllerName = "mcp-addition-controller"

// MCPAdditionReconciler answers every guest mcp.server.added (ref 5.4),
// keyed by Dot: it writes an accepted server into the Dot's spec with a
// field manager of its own and logs the answer. It writes no status.
type MCPAdditionReconciler struct {
	Client   client.Client
	Log      *WorkLog
	Recorder recorder.EventRecorder
}

// SetupWithManager registers the reconciler: a Dot, its Approvals (an
// approval of an addition) and new events in its log wake it.
func (r *MCPAdditionReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return setUpWork(mgr, r.Log, MCPAdditionControllerName, workWatch{approvals: true}, r)
}

// Reconcile answers the additions the log has not answered yet.
func (r *MCPAdditionReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	in, err := openWork(ctx, r.Client, r.Log, req, false, true)
	if in == nil || err != nil {
		return ctrl.Result{}, err
	}
	defer in.Close()
	steps := &workSteps{}
	steps.run("record the MCP servers added", r.recordMCPAdditions(ctx, in.Dot, in.DotWork, in.Approvals))
	return steps.result(ctx, r.Recorder, in.Dot, ctrl.Result{})
}

// mcpAddManagerPrefix names the field managers of the MCP servers a Dot adds
// itself (add_mcp_server, ref 7): one manager per server, its name after the
// prefix. Server-side apply removes what a manager applied before and no
// longer applies, so one manager for all of them would have to apply every
// server it ever wrote each time; one each owns its entry alone, and a GitOps
// apply that changes the entry meets a conflict instead of taking it silently.
const mcpAddManagerPrefix = "invisible-dots-mcp-add/"

// addToolName is the guest's tool that asks for a server (guest/engine/tools)
// and addPermission the permission it exercises (protocol.Permissions).
const (
	addToolName   = "add_mcp_server"
	addPermission = "mcp.servers.add"
)

// recordMCPAdditions answers every guest mcp.server.added no host event has
// answered yet (ref 5.4): it decides again (lifecycle.DecideMCPAddition),
// writes an accepted server into the Dot's spec and logs dot.updated, which
// uses its approval up; a refused one is logged as mcp.server.refused. The
// guest link pushes the config with the new server, whose permission is left
// to its default, ask.
func (r *MCPAdditionReconciler) recordMCPAdditions(ctx context.Context, dot *dotsv1.Dot, w *DotWork, approvals []dotsv1.Approval) error {
	view, id := w.View(), w.id
	pending := view.PendingMCPAdditions()
	if len(pending) == 0 {
		return nil
	}
	listed := make(map[string]protocol.Decision, len(dot.Spec.Permissions))
	for name, d := range dot.Spec.Permissions {
		listed[name] = protocol.Decision(d)
	}
	facts := lifecycle.MCPAdditionFacts{
		Declared: map[string]protocol.MCPServerConfig{},
		Allowed:  protocol.ResolvePermission(addPermission, listed, nil) == protocol.Allow,
		Approved: map[string]json.RawMessage{},
		Used:     view.MCPApprovalsUsed,
	}
	for _, s := range dot.Spec.MCPServers {
		facts.Declared[s.Name] = runtimeEntry(s)
	}
	for _, a := range approvals {
		if a.Spec.Tool == addToolName && a.Spec.Decision == dotsv1.Approve && a.Spec.Arguments != nil && a.Spec.RequestID != "" {
			facts.Approved[a.Spec.RequestID] = a.Spec.Arguments.Raw
		}
	}
	for _, add := range pending {
		d := lifecycle.DecideMCPAddition(add, facts)
		if d.Refused != "" {
			data, _ := json.Marshal(map[string]any{"name": d.Name, "reason": d.Refused, "mcp_event": add.EventID})
			if err := w.Decide(ctx, nil, store.Event{Dot: id, Type: wire.EventMCPServerRefused, Source: store.SourceHost, Data: data}); err != nil {
				return err
			}
			r.Recorder.Eventf(dot, nil, corev1.EventTypeWarning, "MCPServerRefused", "AddMCPServer", "Dot %s asked to add the MCP server %q: %s", dot.Name, d.Name, d.Refused)
			continue
		}
		if d.Write {
			if err := r.applyMCPServer(ctx, dot, d.Name, d.Entry); err != nil {
				return err
			}
		}
		// Logged after the write: a control plane that stops between the two
		// finds the entry written and owes only this line (d.Already).
		logged := map[string]any{"name": dot.Name, "mcp_server_added": d.Name, "mcp_event": add.EventID}
		if d.ApprovalID != "" {
			logged["approval_id"] = d.ApprovalID
		}
		data, _ := json.Marshal(logged)
		if err := w.Decide(ctx, nil, store.Event{Dot: id, Type: wire.EventDotUpdated, Source: store.SourceHost, Data: data}); err != nil {
			return err
		}
		facts.Declared[d.Name] = d.Entry
		r.Recorder.Eventf(dot, nil, corev1.EventTypeNormal, "MCPServerAdded", "AddMCPServer", "Dot %s added the MCP server %q to its spec", dot.Name, d.Name)
	}
	return nil
}

// applyMCPServer writes one server into the Dot's spec.mcpServers (a list
// keyed by name) with its own field manager.
func (r *MCPAdditionReconciler) applyMCPServer(ctx context.Context, dot *dotsv1.Dot, name string, e protocol.MCPServerConfig) error {
	server := map[string]any{"name": name}
	if e.Command != "" {
		server["command"] = e.Command
	}
	if len(e.Args) > 0 {
		server["args"] = toAny(e.Args)
	}
	if len(e.Env) > 0 {
		server["env"] = toAnyMap(e.Env)
	}
	if e.URL != "" {
		server["url"] = e.URL
	}
	if len(e.Headers) > 0 {
		server["headers"] = toAnyMap(e.Headers)
	}
	if len(e.Secrets) > 0 {
		server["secrets"] = toAny(e.Secrets)
	}
	if e.TimeoutS != 0 {
		server["timeoutSeconds"] = int64(e.TimeoutS)
	}
	if e.StartupTimeoutS != 0 {
		server["startupTimeoutSeconds"] = int64(e.StartupTimeoutS)
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": dotsv1.GroupVersion.String(),
		"kind":       "Dot",
		"metadata":   map[string]any{"name": dot.Name, "namespace": dot.Namespace},
		"spec":       map[string]any{"mcpServers": []any{server}},
	}}
	if err := r.Client.Patch(ctx, u, client.Apply, client.FieldOwner(mcpAddManagerPrefix+name)); err != nil {
		return fmt.Errorf("add the MCP server %s to Dot %s: %w", name, dot.Name, err)
	}
	return nil
}

// runtimeEntry is a spec's server as the runtime config carries it.
func runtimeEntry(s dotsv1.MCPServer) protocol.MCPServerConfig {
	e := protocol.MCPServerConfig{Command: s.Command, Args: s.Args, Env: maps.Clone(s.Env), URL: s.URL,
		Headers: maps.Clone(s.Headers), Secrets: s.Secrets}
	if s.TimeoutSeconds != nil {
		e.TimeoutS = int(*s.TimeoutSeconds)
	}
	if s.StartupTimeoutSeconds != nil {
		e.StartupTimeoutS = int(*s.StartupTimeoutSeconds)
	}
	return e
}

func toAny(l []string) []any {
	out := make([]any, len(l))
	for i, v := range l {
		out[i] = v
	}
	return out
}

func toAnyMap(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
