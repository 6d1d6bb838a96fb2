package dotsapi

import (
	"cmp"
	"net/http"
	"slices"
	"strings"
	"time"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
)

// maxEndedTasks bounds an answer of the ended tasks' route (ref 9.6: at
// most 200, the latest end first).
const maxEndedTasks = 200

// EndedTasks answers GET /dots/v1/tasks and /dots/v1/namespaces/{ns}/tasks.
type EndedTasks struct {
	Tasks []dotsv1.Task `json:"tasks"`
}

// listEndedTasks is ref 9.6's GET /api/tasks?status=&finished_after=: the
// tasks of every Dot (of one namespace, under a namespace's path) that
// ended in one of the statuses after that time, the latest end first, at
// most 200. The server filters, so a page that wants the day's failures
// (the Inbox) is not sent every task there is. A task's end is its
// status.completionTime. Only the namespaces where the caller may list
// tasks are read.
func (h *Handler) listEndedTasks(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	for key := range q {
		if key != "status" && key != "finished_after" {
			return badRequest("unknown query parameter %q (the parameters are status and finished_after)", key)
		}
	}
	var phases []dotsv1.TaskPhase
	for _, s := range strings.Split(q.Get("status"), ",") {
		p := dotsv1.TaskPhase(strings.ToUpper(strings.TrimSpace(s)))
		if !p.Ended() {
			return badRequest("status=%q: the statuses are one or several of COMPLETED, FAILED and CANCELLED, comma-separated", q.Get("status"))
		}
		phases = append(phases, p)
	}
	var after time.Time
	if v := q.Get("finished_after"); v != "" {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return badRequest("finished_after=%q is not an RFC 3339 time (2026-12-05T09:00:00Z)", v)
		}
		after = t
	}
	u, err := callerOf(r)
	if err != nil {
		return err
	}
	ns := r.PathValue("ns")
	var opts []client.ListOption
	if ns != "" {
		if err := h.authorize(r.Context(), tasksAttributes(u, ns)); err != nil {
			return err
		}
		opts = append(opts, client.InNamespace(ns))
	}
	var list dotsv1.TaskList
	if err := h.dots.List(r.Context(), &list, opts...); err != nil {
		return err
	}
	allowed := map[string]bool{ns: ns != ""}
	out := EndedTasks{Tasks: []dotsv1.Task{}}
	for _, t := range list.Items {
		end := t.Status.CompletionTime
		if !slices.Contains(phases, t.Status.Phase) || end == nil || !end.After(after) {
			continue
		}
		may, asked := allowed[t.Namespace]
		if !asked {
			may = h.authorize(r.Context(), tasksAttributes(u, t.Namespace)) == nil
			allowed[t.Namespace] = may
		}
		if may {
			t.ManagedFields = nil
			out.Tasks = append(out.Tasks, t)
		}
	}
	slices.SortFunc(out.Tasks, func(a, b dotsv1.Task) int {
		return cmp.Or(b.Status.CompletionTime.Compare(a.Status.CompletionTime.Time), strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name))
	})
	if len(out.Tasks) > maxEndedTasks {
		out.Tasks = out.Tasks[:maxEndedTasks]
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// tasksAttributes asks whether u may list the Tasks of namespace ns.
func tasksAttributes(u user.Info, ns string) authorizer.AttributesRecord {
	return authorizer.AttributesRecord{
		User: u, Verb: "list", Namespace: ns, ResourceRequest: true,
		APIGroup: dotsv1.GroupVersion.Group, APIVersion: dotsv1.GroupVersion.Version, Resource: "tasks",
	}
}
