package webui

// The page's one long-lived connection.
//
// A browser opens at most six HTTP/1.1 connections to one origin, across all
// its tabs, and a watch or an event stream holds one for as long as the page
// is open. With a watch per kind (Dots, Computers, Approvals, Tasks) and the
// Dots API's stream, two tabs of the client took every connection there was,
// and the third tab's reads waited for ever (measured: web/e2e/tabs.spec.ts).
//
// HTTP/2 would put every request of the origin on one connection, but
// browsers speak it only over TLS, and this server is plain HTTP on a
// loopback address: serving it over HTTPS would need a certificate the
// browser does not trust (a warning page at every first visit, or a CA the
// person has to install), for a server that never leaves the machine. So
// instead the page holds one connection here, and this handler, which has no
// such limit towards the API server, opens the watches and the stream there
// and writes them into one Server-Sent Events answer. A tab then holds one
// connection, and a tab hidden for a while lets it go (web/src/lib/live.ts).

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
)

// LivePath is where the page reads its watches and the Dots API's stream as
// one answer: ?watch=KIND:RESOURCEVERSION (repeated, one per kind) or
// ?watch=KIND@SELECTOR:RESOURCEVERSION for the objects of the kind a label
// selector picks (one Dot's tasks: tasks@dots.invisible.dev/dot=NAME), and
// the stream's own ?types= and ?after=, and ?namespace= to watch one
// namespace's objects (a person who may not list every namespace's). Each
// watch event comes as an SSE event "watch" whose data is {"kind": KIND,
// "selector": SELECTOR, "event": <the watch event>}, the selector left out
// when the watch has none; the stream's events come as the stream wrote
// them. The answer ends when any of its parts ends, and the page opens it
// again from where each part was.
//
// The selector rides on the one connection rather than on a watch of its
// own, which would take one of the browser's six connections again; the API
// server evaluates it, so the page is sent that Dot's tasks alone. A label
// selector holds no ':' and a kind no '@', so KIND@SELECTOR ends at the
// first ':' whatever the resourceVersion holds.
const LivePath = "/web/v1/live"

// liveKinds are the collections of our group a page may watch here.
var liveKinds = map[string]bool{"dots": true, "computers": true, "approvals": true, "tasks": true, "channels": true}

const liveGroupPath = "/apis/dots.invisible.dev/v1alpha1/"

// maxWatchLine is the longest watch event read: a Dot's whole object with
// its status fits many times over.
const maxWatchLine = 16 << 20

// backend is a server the handler reads itself, with the server's
// credential (the same transport the proxy uses).
type backend struct {
	base   *url.URL
	client *http.Client
}

// get reads p with the backend's credential, or with the token of the
// session ctx carries (sign-in).
func (u *backend) get(ctx context.Context, p string, q url.Values, accept string) (*http.Response, error) {
	target := *u.base
	target.Path = strings.TrimSuffix(target.Path, "/") + p
	target.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", accept)
	if ss := sessionOf(ctx); ss != nil {
		req.Header.Set("Authorization", "Bearer "+ss.token)
	}
	return u.client.Do(req)
}

type liveWatch struct{ kind, selector, rv string }

// parseLive reads LivePath's query, or says what is wrong with it.
func parseLive(q url.Values) (watches []liveWatch, namespace string, stream url.Values, err error) {
	stream = url.Values{}
	seen := map[string]bool{}
	for key, vals := range q {
		switch key {
		case "watch":
			for _, v := range vals {
				what, rv, ok := strings.Cut(v, ":")
				kind, selector, selected := strings.Cut(what, "@")
				if !ok || !liveKinds[kind] || rv == "" {
					return nil, "", nil, fmt.Errorf("watch=%q is not KIND:RESOURCEVERSION or KIND@LABELSELECTOR:RESOURCEVERSION with a kind of dots, computers, approvals, tasks or channels (list the kind first, with the same labelSelector, then watch from the list's resourceVersion)", v)
				}
				if selected {
					if _, err := labels.Parse(selector); err != nil || strings.TrimSpace(selector) == "" {
						return nil, "", nil, fmt.Errorf("watch=%q: %q is not a label selector such as dots.invisible.dev/dot=NAME (leave out @ to watch every %s)", v, selector, kind)
					}
				}
				if seen[what] {
					return nil, "", nil, fmt.Errorf("%s is watched twice; give each kind, or kind and selector, once", what)
				}
				seen[what] = true
				watches = append(watches, liveWatch{kind, selector, rv})
			}
		case "types", "after":
			stream[key] = vals
		case "namespace":
			namespace = vals[0]
			if errs := validation.IsDNS1123Label(namespace); len(vals) > 1 || len(errs) > 0 {
				return nil, "", nil, fmt.Errorf("namespace=%q is not one namespace's name", strings.Join(vals, ","))
			}
		default:
			return nil, "", nil, fmt.Errorf("unknown query parameter %q (the parameters are watch, namespace, types and after)", key)
		}
	}
	return watches, namespace, stream, nil
}

func (h *handler) serveLive(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", "GET")
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "the live stream is read with GET")
		return
	}
	watches, namespace, streamQuery, err := parseLive(r.URL.Query())
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()

	// Every part is opened before the answer begins, so a refusal (a
	// resourceVersion too old, a right missing) is still an answer the
	// page can act on: it lists again.
	var bodies []io.ReadCloser
	defer func() {
		for _, b := range bodies {
			_ = b.Close()
		}
	}()
	open := func(u *backend, p string, q url.Values, accept, what string) (io.Reader, bool) {
		res, err := u.get(ctx, p, q, accept)
		if err != nil {
			writeError(w, http.StatusBadGateway, "api_unreachable", what+" did not answer: is invisible-dots server still running?")
			return nil, false
		}
		bodies = append(bodies, res.Body)
		if ss := sessionOf(ctx); ss != nil && res.StatusCode == http.StatusUnauthorized {
			h.signIn.drop(ss)
		}
		if res.StatusCode != http.StatusOK {
			msg, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
			w.Header().Set("Content-Type", res.Header.Get("Content-Type"))
			w.WriteHeader(res.StatusCode)
			_, _ = w.Write(msg)
			return nil, false
		}
		return res.Body, true
	}
	frames := make(chan []byte, 64)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	send := func(b []byte) bool {
		select {
		case frames <- b:
			return true
		case <-ctx.Done():
			return false
		}
	}
	var starts []func()
	for _, wt := range watches {
		q := url.Values{"watch": {"1"}, "allowWatchBookmarks": {"true"}, "resourceVersion": {wt.rv}}
		if wt.selector != "" {
			q.Set("labelSelector", wt.selector)
		}
		p := liveGroupPath + wt.kind
		if namespace != "" {
			p = liveGroupPath + "namespaces/" + namespace + "/" + wt.kind
		}
		body, ok := open(h.apiUp, p, q, "application/json", "the API server")
		if !ok {
			return
		}
		// The page tells its watches apart by kind and selector.
		var id bytes.Buffer
		fmt.Fprintf(&id, "\"kind\":%q", wt.kind)
		if wt.selector != "" {
			sel, _ := json.Marshal(wt.selector)
			fmt.Fprintf(&id, ",\"selector\":%s", sel)
		}
		starts = append(starts, func() {
			sc := bufio.NewScanner(body)
			sc.Buffer(make([]byte, 64<<10), maxWatchLine)
			for sc.Scan() {
				line := bytes.TrimSpace(sc.Bytes())
				if len(line) == 0 {
					continue
				}
				var b bytes.Buffer
				fmt.Fprintf(&b, "event: watch\ndata: {%s,\"event\":%s}\n\n", id.Bytes(), line)
				if !send(b.Bytes()) {
					return
				}
			}
		})
	}
	if streamQuery != nil {
		body, ok := open(h.dotsUp, "/dots/v1/stream", streamQuery, "text/event-stream", "the Dots API")
		if !ok {
			return
		}
		starts = append(starts, func() {
			// Frames are handed on whole, as the stream wrote them.
			br := bufio.NewReader(body)
			var frame bytes.Buffer
			for {
				line, err := br.ReadBytes('\n')
				frame.Write(line)
				if err != nil {
					return
				}
				if len(bytes.TrimRight(line, "\r\n")) == 0 {
					if frame.Len() > len(line) && !send(bytes.Clone(frame.Bytes())) {
						return
					}
					frame.Reset()
				}
			}
		})
	}
	for _, start := range starts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A part that ends ends the whole answer: the page opens it
			// again from where each part stood.
			defer cancel()
			start()
		}()
	}

	hdr := w.Header()
	hdr.Set("Content-Type", "text/event-stream")
	hdr.Set("Cache-Control", "no-cache")
	hdr.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	_, _ = io.WriteString(w, ": live\n\n")
	if rc.Flush() != nil {
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case b := <-frames:
			if _, err := w.Write(b); err != nil {
				return
			}
			// What else is ready goes in the same write.
			for more := true; more; {
				select {
				case b := <-frames:
					if _, err := w.Write(b); err != nil {
						return
					}
				default:
					more = false
				}
			}
			if rc.Flush() != nil {
				return
			}
		}
	}
}
