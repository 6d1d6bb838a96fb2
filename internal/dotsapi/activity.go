package dotsapi

import (
	"net/http"
	"slices"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
	"github.com/invisible-dots/invisible-dots/internal/eventtext"
)

// ActivityEvent is an event of the log with its words for people: the line
// internal/eventtext gives it (the command line's words, so the web client
// and `invisible-dots logs` say the same) and the family the web client's
// chips group it in.
type ActivityEvent struct {
	wire.Event
	Text   string `json:"text"`
	Family string `json:"family"`
}

// Activity is the answer of the activity route.
type Activity struct {
	Events []ActivityEvent `json:"events"`
	// Families lists every family and its types, so a client's chips come
	// from the one table below.
	Families []ActivityFamily `json:"families"`
}

// ActivityFamily is a chip of the Activity page: a name for people and the
// event types it stands for.
type ActivityFamily struct {
	Name  string   `json:"name"`
	Types []string `json:"types"`
}

// activityFamilies groups every type the log can hold (a test keeps it
// whole): the Activity page's chips, whose chosen types become the
// request's types filter.
var activityFamilies = []ActivityFamily{
	{"chat", []string{wire.EventMessageUser, protocol.EventMessageAssistant}},
	{"tasks", []string{wire.EventTaskCreated, protocol.EventTaskStarted, protocol.EventTaskProgress, protocol.EventTaskCompleted, protocol.EventTaskFailed, wire.EventTaskCancelled}},
	{"tools", []string{protocol.EventToolCalled}},
	{"approvals", []string{protocol.EventApprovalRequested, wire.EventApprovalResolved}},
	{"browser", []string{protocol.EventBrowserIdentityCreated, protocol.EventBrowserIdentityDeleted, protocol.EventBrowserIdentityLaunch, protocol.EventBrowserIdentityClosed}},
	{"computer", []string{wire.EventComputerState, protocol.EventAgentStarted, protocol.EventAgentState, protocol.EventAutomationNextRun, protocol.EventOutboxReset, wire.EventGuestRefused}},
	{"memory", []string{protocol.EventMemoryUpdated}},
	{"config", []string{wire.EventDotCreated, wire.EventDotUpdated, protocol.EventMCPServerAdded, wire.EventMCPServerRefused}},
	{"channels", []string{wire.EventChannelPeerPaired, wire.EventChannelStatus}},
}

func familyOf(typ string) string {
	for _, f := range activityFamilies {
		if slices.Contains(f.Types, typ) {
			return f.Name
		}
	}
	return ""
}

// getActivity is getEvents with each event's words: the same query, the
// same right (dots/events get).
func (h *Handler) getActivity(w http.ResponseWriter, r *http.Request) error {
	events, err := h.eventsPage(r)
	if err != nil {
		return err
	}
	out := Activity{Events: make([]ActivityEvent, 0, len(events)), Families: activityFamilies}
	for _, e := range events {
		we := wireEvent(e)
		out.Events = append(out.Events, ActivityEvent{Event: we, Text: eventtext.Line(we), Family: familyOf(e.Type)})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
