package dotsapi

import (
	"net/http"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// tools passes the engine's GET /tools through (ref 9.6): the tool table
// and the MCP servers are the engine's, and the control plane keeps no copy.
func (h *Handler) tools(w http.ResponseWriter, r *http.Request) error {
	var out protocol.Tools
	if err := h.engineGet(r, toolsSubresource, protocol.RouteTools, &out); err != nil {
		return err
	}
	if out.Tools == nil {
		out.Tools = []protocol.ToolInfo{}
	}
	if out.MCPServers == nil {
		out.MCPServers = []protocol.MCPServerStatus{}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// skills passes the engine's GET /skills through (ref 8.6, 9.6).
func (h *Handler) skills(w http.ResponseWriter, r *http.Request) error {
	var out protocol.Skills
	if err := h.engineGet(r, skillsSubresource, protocol.RouteSkills, &out); err != nil {
		return err
	}
	if out.Skills == nil {
		out.Skills = []protocol.Skill{}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// engineGet reads one of the engine's routes through dot-agentd's reverse
// proxy into out, decoded as the protocol's shape so nothing else passes;
// the engine's refusals pass through with their code and status.
func (h *Handler) engineGet(r *http.Request, subresource, route string, out any) error {
	g, err := h.guestFor(r, "get", subresource)
	if err != nil {
		return err
	}
	path := protocol.AgentRoutePrefix + route
	resp, cancel, err := h.guestGet(r.Context(), g, path)
	if err != nil {
		return err
	}
	defer cancel()
	defer resp.Body.Close()
	return decodeAnswer(resp, path, out)
}
