package dotsapi

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/client"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
)

// The proxy a test identity is created with: a secret no answer repeats.
const testProxy = "socks5://fare:hunter2-secret@proxy.example:1080"

func TestBrowserIdentities(t *testing.T) {
	e := newGuestEnv(t, guestEnvOptions{})
	const id = "shopping-4f2a"
	used := int64(1_700_000_100_000)
	shopping := protocol.BrowserIdentity{ID: id, Name: "shopping", HasProxy: true, Open: true, CreatedAtMS: 1_700_000_000_000, LastUsedAtMS: &used}
	list := protocol.BrowserIdentities{Identities: []protocol.BrowserIdentity{shopping, {ID: "news-9c1d", Name: "news", CreatedAtMS: 1_700_000_050_000}}}
	engine := protocol.AgentRoutePrefix + protocol.RouteBrowserIdents
	one := engine + "/" + id
	e.guests.serve(runningDot, engine, func(url.Values) *http.Response { return fakeAnswer(http.StatusOK, mustJSON(t, list)) })
	e.guests.serve(runningDot, one, func(url.Values) *http.Response { return fakeAnswer(http.StatusOK, mustJSON(t, shopping)) })
	e.guests.serve(runningDot, "POST "+engine, func(url.Values) *http.Response {
		return fakeAnswer(http.StatusCreated, mustJSON(t, shopping))
	})
	e.guests.serve(runningDot, "DELETE "+one, func(url.Values) *http.Response { return fakeAnswer(http.StatusNoContent, "") })
	e.guests.serve(runningDot, "POST "+one+"/close", func(url.Values) *http.Response { return fakeAnswer(http.StatusNoContent, "") })

	listPath := func(ns, name string) string { return wire.BrowserIdentitiesPath(ns, name) }
	onePath := func(ns, name string) string { return wire.BrowserIdentityPath(ns, name, id) }
	closePath := func(ns, name string) string { return wire.BrowserClosePath(ns, name, id) }
	framePath := func(ns, name string) string { return wire.BrowserFramePath(ns, name, id) }
	createBody := `{"name":"shopping","proxy":"` + testProxy + `"}`
	decoded := func(want any, into func() any) func(t *testing.T, _ *http.Response, body []byte) {
		return func(t *testing.T, _ *http.Response, body []byte) {
			got := into()
			if err := jsonUnmarshalStrict(body, got); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("-want +got:\n%s", diff)
			}
			if strings.Contains(string(body), "hunter2") {
				t.Errorf("the answer %s repeats the proxy", body)
			}
		}
	}
	cases := []guestCase{
		{reason: "the engine's list", who: "viewer", path: listPath(runningDot.Namespace, runningDot.Name),
			want: answer{Status: http.StatusOK}, asks: asked(runningDot, engine),
			check: decoded(&list, func() any { return &protocol.BrowserIdentities{} })},
		{reason: "one identity", who: "viewer", path: onePath(runningDot.Namespace, runningDot.Name),
			want: answer{Status: http.StatusOK}, asks: asked(runningDot, one),
			check: decoded(&shopping, func() any { return &protocol.BrowserIdentity{} })},
		{reason: "an editor creates one with a proxy: it goes to the engine and comes back as hasProxy only", method: http.MethodPost, who: "editor",
			path: listPath(runningDot.Namespace, runningDot.Name), body: createBody,
			want: answer{Status: http.StatusCreated}, asks: askedBy(runningDot, http.MethodPost, engine),
			check: decoded(&shopping, func() any { return &protocol.BrowserIdentity{} })},
		{reason: "an editor deletes one", method: http.MethodDelete, who: "editor", path: onePath(runningDot.Namespace, runningDot.Name),
			want: answer{Status: http.StatusNoContent}, asks: askedBy(runningDot, http.MethodDelete, one)},
		{reason: "an editor closes one", method: http.MethodPost, who: "editor", path: closePath(runningDot.Namespace, runningDot.Name),
			want: answer{Status: http.StatusNoContent}, asks: askedBy(runningDot, http.MethodPost, one+"/close")},
		{reason: "a viewer may not create one", method: http.MethodPost, who: "viewer", path: listPath(runningDot.Namespace, runningDot.Name), body: createBody,
			want: answer{http.StatusForbidden, wire.CodeForbidden, `user "vera" may not create dots/browser-identities of "team-a/runner"`}},
		{reason: "a viewer may not delete one", method: http.MethodDelete, who: "viewer", path: onePath(runningDot.Namespace, runningDot.Name),
			want: answer{http.StatusForbidden, wire.CodeForbidden, "may not delete dots/browser-identities"}},
		{reason: "a viewer may not close one", method: http.MethodPost, who: "viewer", path: closePath(runningDot.Namespace, runningDot.Name),
			want: answer{http.StatusForbidden, wire.CodeForbidden, "may not update dots/browser-identities"}},
		{reason: "a proxy that is not a string is refused here, its value not repeated", method: http.MethodPost, who: "editor",
			path: listPath(runningDot.Namespace, runningDot.Name), body: `{"name":"x","proxy":8675309}`,
			want: answer{http.StatusBadRequest, wire.CodeInvalidRequest, "cannot unmarshal number"}},
		{reason: "a body with a field the engine does not take", method: http.MethodPost, who: "editor",
			path: listPath(runningDot.Namespace, runningDot.Name), body: `{"name":"x","seed":1}`,
			want: answer{http.StatusBadRequest, wire.CodeInvalidRequest, `unknown field "seed"`}},
		{reason: "a query is refused", who: "viewer", path: listPath(runningDot.Namespace, runningDot.Name), query: url.Values{"x": {"1"}},
			want: answer{http.StatusBadRequest, wire.CodeInvalidRequest, "no query parameters"}},
		{reason: "an id that cannot be one segment of the engine's route", who: "viewer", path: listPath(runningDot.Namespace, runningDot.Name) + "/a%01b",
			want: answer{http.StatusBadRequest, wire.CodeInvalidRequest, "browser identity id"}},
		{reason: "the list takes no PUT", method: http.MethodPut, who: "editor", path: listPath(runningDot.Namespace, runningDot.Name),
			want: answer{http.StatusMethodNotAllowed, wire.CodeMethodNotAllowed, "does not take PUT"}},
	}
	cases = append(cases, commonGuestRefusals(listPath, nil)...)
	cases = append(cases, commonGuestRefusals(onePath, nil)...)
	cases = append(cases, commonGuestRefusals(framePath, nil)...)
	cases = append(cases, withMethod(commonGuestRefusals(listPath, nil), http.MethodPost, "create", `{"name":"x"}`)...)
	cases = append(cases, withMethod(commonGuestRefusals(onePath, nil), http.MethodDelete, "delete", "")...)
	cases = append(cases, withMethod(commonGuestRefusals(closePath, nil), http.MethodPost, "update", "")...)
	e.run(t, cases)

	// The body the engine got is the person's, proxy included, as JSON.
	e.guests.sent()
	if a, _, _ := e.send(t, http.MethodPost, "editor", listPath(runningDot.Namespace, runningDot.Name), nil, createBody); a.Status != http.StatusCreated {
		t.Fatalf("create: %+v", a)
	}
	if got, want := e.guests.sent(), []string{"application/json " + createBody}; !cmp.Equal(got, want) {
		t.Errorf("the engine was sent %q; want %q", got, want)
	}

	// The engine's refusals pass through with their code and status; a
	// guest that repeats the proxy in its words has it masked.
	refuse := func(route, body string, status int) {
		e.guests.serve(runningDot, route, func(url.Values) *http.Response { return fakeAnswer(status, body) })
	}
	refuse("POST "+engine, `{"error":"invalid","message":"the proxy `+testProxy+` is wrong"}`, http.StatusBadRequest)
	refuse(one, `{"error":"not_found","message":"no identity shopping-4f2a"}`, http.StatusNotFound)
	refuse("DELETE "+one, `{"error":"not_found","message":"no identity shopping-4f2a"}`, http.StatusNotFound)
	refuse("POST "+one+"/close", `{"error":"not_found","message":"no identity shopping-4f2a"}`, http.StatusNotFound)
	e.run(t, []guestCase{
		{reason: "the engine's invalid passes through, the proxy masked", method: http.MethodPost, who: "editor",
			path: listPath(runningDot.Namespace, runningDot.Name), body: createBody,
			want: answer{http.StatusBadRequest, protocol.ErrInvalid, "the proxy *** is wrong"}, asks: askedBy(runningDot, http.MethodPost, engine)},
		{reason: "the engine's not_found of a read", who: "viewer", path: onePath(runningDot.Namespace, runningDot.Name),
			want: answer{http.StatusNotFound, protocol.ErrNotFound, "no identity"}, asks: asked(runningDot, one)},
		{reason: "the engine's not_found of a delete", method: http.MethodDelete, who: "editor", path: onePath(runningDot.Namespace, runningDot.Name),
			want: answer{http.StatusNotFound, protocol.ErrNotFound, "no identity"}, asks: askedBy(runningDot, http.MethodDelete, one)},
		{reason: "the engine's not_found of a close", method: http.MethodPost, who: "editor", path: closePath(runningDot.Namespace, runningDot.Name),
			want: answer{http.StatusNotFound, protocol.ErrNotFound, "no identity"}, asks: askedBy(runningDot, http.MethodPost, one+"/close")},
	})
	refuse("POST "+engine, `{"error":"limit","message":"a Dot keeps at most 20 identities"}`, http.StatusConflict)
	e.run(t, []guestCase{{reason: "the engine's limit passes through", method: http.MethodPost, who: "editor",
		path: listPath(runningDot.Namespace, runningDot.Name), body: `{"name":"one-more"}`,
		want: answer{http.StatusConflict, protocol.ErrLimit, "at most 20"}, asks: askedBy(runningDot, http.MethodPost, engine)}})
	refuse("POST "+engine, mustJSON(t, map[string]any{"id": "x", "name": "x", "hasProxy": true, "open": false, "created_at_ms": 1, "last_used_at_ms": nil, "proxy": testProxy}), http.StatusCreated)
	e.run(t, []guestCase{{reason: "an answer with a field the protocol does not have (the proxy) is not passed on", method: http.MethodPost, who: "editor",
		path: listPath(runningDot.Namespace, runningDot.Name), body: createBody,
		want: answer{http.StatusBadGateway, wire.CodeGuestError, "not what the protocol says (a field the protocol does not have"}, asks: askedBy(runningDot, http.MethodPost, engine)}})

	// The frame: a JPEG while open, the engine's refusals otherwise.
	jpeg := append([]byte{0xff, 0xd8, 0xff, 0xe0}, bytes.Repeat([]byte{7}, 64)...)
	frame := func(status int, body []byte) {
		e.guests.serve(runningDot, one+"/frame", func(url.Values) *http.Response {
			return &http.Response{StatusCode: status, Header: http.Header{}, Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body))}
		})
	}
	fp := framePath(runningDot.Namespace, runningDot.Name)
	frame(http.StatusOK, jpeg)
	e.run(t, []guestCase{{reason: "a frame of an open identity", who: "viewer", path: fp,
		want: answer{Status: http.StatusOK}, asks: asked(runningDot, one+"/frame"),
		check: func(t *testing.T, resp *http.Response, body []byte) {
			if ct := resp.Header.Get("Content-Type"); ct != "image/jpeg" || !bytes.Equal(body, jpeg) {
				t.Errorf("answer %s of %d bytes; want the engine's JPEG", ct, len(body))
			}
			if resp.Header.Get("X-Content-Type-Options") != "nosniff" || resp.Header.Get("Cache-Control") != "no-store" || resp.Header.Get("Content-Security-Policy") != wire.FileCSP {
				t.Errorf("headers %v lack nosniff, no-store or the CSP", resp.Header)
			}
		}},
		{reason: "the frame takes no query", who: "viewer", path: fp, query: url.Values{"q": {"1"}},
			want: answer{http.StatusBadRequest, wire.CodeInvalidRequest, "no query parameters"}},
	})
	for _, c := range []struct {
		code   string
		status int
	}{
		{protocol.ErrNotOpen, http.StatusConflict},
		{protocol.ErrBusy, http.StatusServiceUnavailable},
		{protocol.ErrFrameFailed, http.StatusBadGateway},
		{protocol.ErrCrashed, http.StatusBadGateway},
		{protocol.ErrNotFound, http.StatusNotFound},
	} {
		if got := protocol.ErrorStatus(c.code); got != c.status {
			t.Fatalf("protocol.ErrorStatus(%s) = %d; the test expects %d", c.code, got, c.status)
		}
		frame(c.status, []byte(`{"error":"`+c.code+`","message":"the engine says `+c.code+`"}`))
		e.run(t, []guestCase{{reason: "the engine's " + c.code + " passes through", who: "viewer", path: fp,
			want: answer{c.status, c.code, "the engine says " + c.code}, asks: asked(runningDot, one+"/frame")}})
	}
	frame(http.StatusOK, []byte("<svg onload=alert(1)>"))
	e.run(t, []guestCase{{reason: "a frame that is no JPEG is not served as one", who: "viewer", path: fp,
		want: answer{http.StatusBadGateway, wire.CodeGuestError, "not a JPEG"}, asks: asked(runningDot, one+"/frame")}})

	// The Go client.
	viewer, err := client.New(e.restConfig("viewer"))
	if err != nil {
		t.Fatal(err)
	}
	editor, err := client.New(e.restConfig("editor"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	frame(http.StatusOK, jpeg)
	e.guests.serve(runningDot, "POST "+engine, func(url.Values) *http.Response { return fakeAnswer(http.StatusCreated, mustJSON(t, shopping)) })
	e.guests.serve(runningDot, "DELETE "+one, func(url.Values) *http.Response { return fakeAnswer(http.StatusNoContent, "") })
	e.guests.serve(runningDot, "POST "+one+"/close", func(url.Values) *http.Response { return fakeAnswer(http.StatusNoContent, "") })
	if got, err := viewer.BrowserIdentities(ctx, runningDot.Namespace, runningDot.Name); err != nil || !cmp.Equal(got, list) {
		t.Errorf("BrowserIdentities: %v, -want +got:\n%s", err, cmp.Diff(list, got))
	}
	proxy := testProxy
	if got, err := editor.CreateBrowserIdentity(ctx, runningDot.Namespace, runningDot.Name, protocol.BrowserIdentityCreate{Name: "shopping", Proxy: &proxy}); err != nil || !cmp.Equal(got, shopping) {
		t.Errorf("CreateBrowserIdentity: %v, -want +got:\n%s", err, cmp.Diff(shopping, got))
	}
	if got, err := viewer.BrowserFrame(ctx, runningDot.Namespace, runningDot.Name, id); err != nil || !bytes.Equal(got, jpeg) {
		t.Errorf("BrowserFrame: %v, %d bytes", err, len(got))
	}
	if err := editor.CloseBrowserIdentity(ctx, runningDot.Namespace, runningDot.Name, id); err != nil {
		t.Errorf("CloseBrowserIdentity: %v", err)
	}
	if err := editor.DeleteBrowserIdentity(ctx, runningDot.Namespace, runningDot.Name, id); err != nil {
		t.Errorf("DeleteBrowserIdentity: %v", err)
	}
	if err := viewer.CloseBrowserIdentity(ctx, runningDot.Namespace, runningDot.Name, id); client.StatusOf(err) != http.StatusForbidden {
		t.Errorf("CloseBrowserIdentity as a viewer: %v; want 403", err)
	}
	if _, err := viewer.BrowserIdentity(ctx, stoppedDot.Namespace, stoppedDot.Name, id); client.CodeOf(err) != wire.CodeComputerStopped || client.StatusOf(err) != http.StatusConflict {
		t.Errorf("BrowserIdentity of a stopped computer: %v; want 409 %s", err, wire.CodeComputerStopped)
	}
}

// withMethod turns the shared refusals of a GET into those of method, which
// the authorizer is asked as verb: the editor asks where the viewer did.
func withMethod(cases []guestCase, method, verb, body string) []guestCase {
	for i := range cases {
		cases[i].method, cases[i].body = method, body
		if cases[i].who == "viewer" {
			cases[i].who = "editor"
		}
		cases[i].reason = method + ": " + cases[i].reason
		cases[i].want.Message = strings.Replace(cases[i].want.Message, "may not get", "may not "+verb, 1)
	}
	return cases
}
