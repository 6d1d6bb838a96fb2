package dotsapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dotsv1 "github.com/invisible-dots/invisible-dots/api/v1alpha1"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
	"github.com/invisible-dots/invisible-dots/internal/dotsapi/wire"
	"github.com/invisible-dots/invisible-dots/internal/eventtext"
	"github.com/invisible-dots/invisible-dots/internal/store"
)

// The OpenAI-compatible endpoint (wire.OpenAIPrefix): the Dots a person may
// chat with are models, "<namespace>/<name>", and a chat completion says
// the newest user message of the request to that Dot's conversation and
// answers with the Dot's reply. The Dot keeps its own thread: the history a
// client sends is not said again, only its newest user message, as if typed
// in the web client's chat (the log records it as the Dots API's message).
//
// It is served by the same Handler as the Dots API, behind the same
// filters: a request reaching it is authenticated and RBAC let its path
// through (nonResourceURLs, dots_api_access.yaml); each Dot is then
// authorized as the Dots API's chat is, create on dots/messages in its
// namespace (dots-editor).

// defaultOpenAIAnswerWait bounds the wait for a Dot's answer.
const defaultOpenAIAnswerWait = 10 * time.Minute

// defaultOpenAIMaxWaits is the most chat completions waiting at once: the
// route is long-running, so the API server's in-flight limit does not
// count it, and this does.
const defaultOpenAIMaxWaits = 256

// The OpenAI objects' names.
const (
	openAIObjectList   = "list"
	openAIObjectModel  = "model"
	openAIObjectChat   = "chat.completion"
	openAIObjectChunk  = "chat.completion.chunk"
	openAIFinishStop   = "stop"
	openAIStreamDone   = "data: [DONE]\n\n"
	openAIKeepAlive    = ": keep-alive\n\n"
	openAIChatIDPrefix = "chatcmpl-"
)

// openAIRoutes is every route of the endpoint; docs/api.md documents each.
func (h *Handler) openAIRoutes() []route {
	return []route{
		{"models", map[string]handlerFunc{http.MethodGet: h.listModels}},
		{"models/{model...}", map[string]handlerFunc{http.MethodGet: h.getModel}},
		{"chat/completions", map[string]handlerFunc{http.MethodPost: h.chatCompletion}},
	}
}

// OpenAIRoutes lists every route of the endpoint as "METHOD /v1/PATTERN",
// sorted.
func OpenAIRoutes() []string { return routeList(wire.OpenAIPrefix, (&Handler{}).openAIRoutes()) }

// OpenAI serves the OpenAI-compatible endpoint, every path under
// wire.OpenAIPrefix; its failures are in OpenAI's shape.
func (h *Handler) OpenAI() http.Handler {
	mux := http.NewServeMux()
	for _, rt := range h.openAIRoutes() {
		mux.Handle(wire.OpenAIPrefix+rt.pattern, h.openAIRoute(rt.methods))
	}
	mux.Handle(wire.OpenAIPrefix, h.openAIRoute(nil))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		mux.ServeHTTP(w, r)
	})
}

// openAIRoute dispatches on the method and writes failures in OpenAI's
// shape; a nil map is the catch-all.
func (h *Handler) openAIRoute(methods map[string]handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var err error
		if methods == nil {
			err = openAIErrorf(http.StatusNotFound, wire.OpenAITypeInvalidRequest, wire.CodeNotFound, "", "this server's OpenAI-compatible endpoint has no route %s (it serves /v1/models and /v1/chat/completions)", r.URL.Path)
		} else if fn, ok := methods[r.Method]; ok {
			err = fn(w, r)
		} else {
			allowed := make([]string, 0, len(methods))
			for m := range methods {
				allowed = append(allowed, m)
			}
			w.Header().Set("Allow", strings.Join(allowed, ", "))
			err = openAIErrorf(http.StatusMethodNotAllowed, wire.OpenAITypeInvalidRequest, wire.CodeMethodNotAllowed, "", "%s does not take %s", r.URL.Path, r.Method)
		}
		if err != nil {
			h.writeOpenAIError(w, r, err)
		}
	})
}

// openAIError is a failure of the endpoint, in OpenAI's terms.
type openAIError struct {
	status    int
	typ, code string
	param     string
	message   string
	// noRetry is set once the message was said: OpenAI's clients retry a
	// 408, 409, 429 or 5xx unless told not to (x-should-retry), and a
	// retry would say the message again.
	noRetry bool
}

func (e *openAIError) Error() string { return e.message }

func openAIErrorf(status int, typ, code, param, format string, args ...any) *openAIError {
	return &openAIError{status: status, typ: typ, code: code, param: param, message: fmt.Sprintf(format, args...)}
}

// asOpenAIError is err in OpenAI's terms: the Dots API's own refusals keep
// their status and code; anything else is the server's failure, which the
// log gets and the caller only hears of.
func (h *Handler) asOpenAIError(r *http.Request, err error) *openAIError {
	var oe *openAIError
	if errors.As(err, &oe) {
		return oe
	}
	var ae *apiError
	if errors.As(err, &ae) {
		typ := wire.OpenAITypeInvalidRequest
		switch {
		case ae.status == http.StatusUnauthorized:
			typ = wire.OpenAITypeAuthentication
		case ae.status == http.StatusForbidden:
			typ = wire.OpenAITypePermission
		case ae.status >= 500:
			typ = wire.OpenAITypeServer
		}
		return &openAIError{status: ae.status, typ: typ, code: ae.code, message: ae.message}
	}
	h.log.Error(err, "an OpenAI-compatible request failed", "method", r.Method, "path", r.URL.Path)
	return &openAIError{status: http.StatusInternalServerError, typ: wire.OpenAITypeServer, code: wire.CodeInternal, message: "the server failed to answer; its log says why"}
}

func (e *openAIError) body() wire.OpenAIErrorBody {
	b := wire.OpenAIErrorBody{Error: wire.OpenAIError{Message: e.message, Type: e.typ}}
	if e.param != "" {
		b.Error.Param = &e.param
	}
	if e.code != "" {
		b.Error.Code = &e.code
	}
	return b
}

func (h *Handler) writeOpenAIError(w http.ResponseWriter, r *http.Request, err error) {
	oe := h.asOpenAIError(r, err)
	if oe.status < 500 {
		h.log.V(1).Info("an OpenAI-compatible request was refused", "method", r.Method, "path", r.URL.Path, "status", oe.status, "code", oe.code)
	}
	if oe.noRetry {
		w.Header().Set("X-Should-Retry", "false")
	}
	writeJSON(w, oe.status, oe.body())
}

// modelNotFound is the answer for a model that is not a Dot the caller may
// see: the same whether the Dot is missing or hidden from the caller, so no
// other namespace's Dots are revealed.
func modelNotFound(model string) error {
	return openAIErrorf(http.StatusNotFound, wire.OpenAITypeInvalidRequest, wire.OpenAICodeModelNotFound, "model",
		"the model %q does not exist or you do not have access to it: a model is a Dot, \"<namespace>/<name>\", that you may chat with (GET /v1/models lists them)", model)
}

// listModels lists the Dots the caller may chat with (create dots/messages
// in their namespace), every namespace at once, sorted by id.
func (h *Handler) listModels(w http.ResponseWriter, r *http.Request) error {
	if len(r.URL.Query()) > 0 {
		return openAIErrorf(http.StatusBadRequest, wire.OpenAITypeInvalidRequest, wire.CodeInvalidRequest, "", "GET /v1/models takes no query parameters")
	}
	u, err := callerOf(r)
	if err != nil {
		return err
	}
	var dots dotsv1.DotList
	if err := h.dots.List(r.Context(), &dots); err != nil {
		return fmt.Errorf("list the Dots: %w", err)
	}
	// The namespace's answer covers its Dots; a Dot of a namespace refused
	// as a whole is asked of alone (a role may name Dots: resourceNames).
	namespaceAllowed := map[string]bool{}
	out := wire.OpenAIModelList{Object: openAIObjectList, Data: []wire.OpenAIModel{}}
	for i := range dots.Items {
		d := &dots.Items[i]
		if d.DeletionTimestamp != nil {
			continue
		}
		allowed, asked := namespaceAllowed[d.Namespace]
		if !asked {
			allowed = h.allowed(r.Context(), u, "create", messagesSubresource, d.Namespace, "")
			namespaceAllowed[d.Namespace] = allowed
		}
		if !allowed && !h.allowed(r.Context(), u, "create", messagesSubresource, d.Namespace, d.Name) {
			continue
		}
		out.Data = append(out.Data, openAIModelOf(d))
	}
	slices.SortFunc(out.Data, func(a, b wire.OpenAIModel) int { return strings.Compare(a.ID, b.ID) })
	writeJSON(w, http.StatusOK, out)
	return nil
}

// getModel answers one Dot as a model, if the caller may chat with it. The
// model's slash comes as a slash or escaped (%2F, as OpenAI's clients
// escape a path parameter): the path's rest is the model either way.
func (h *Handler) getModel(w http.ResponseWriter, r *http.Request) error {
	d, err := h.chatDot(r, r.PathValue("model"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, openAIModelOf(d))
	return nil
}

func openAIModelOf(d *dotsv1.Dot) wire.OpenAIModel {
	return wire.OpenAIModel{ID: wire.OpenAIModelID(d.Namespace, d.Name), Object: openAIObjectModel, Created: d.CreationTimestamp.Unix(), OwnedBy: d.Namespace}
}

// allowed asks the authorizer whether u may verb the Dot's subresource
// (name "" for every Dot of the namespace).
func (h *Handler) allowed(ctx context.Context, u user.Info, verb, subresource, namespace, name string) bool {
	decision, _, _ := h.authz.Authorize(ctx, authorizer.AttributesRecord{
		User: u, Verb: verb, Namespace: namespace, Name: name, ResourceRequest: true,
		APIGroup: dotsv1.GroupVersion.Group, APIVersion: dotsv1.GroupVersion.Version,
		Resource: "dots", Subresource: subresource,
	})
	return decision == authorizer.DecisionAllow
}

// chatDot is the Dot model names, once the caller may chat with it: a
// model that is no Dot, or one whose chat the caller may not even read, is
// model_not_found; one whose chat the caller may read but not write
// (dots-viewer) is a 403.
func (h *Handler) chatDot(r *http.Request, model string) (*dotsv1.Dot, error) {
	u, err := callerOf(r)
	if err != nil {
		return nil, err
	}
	ns, name, ok := strings.Cut(model, "/")
	if !ok || len(validation.IsDNS1123Label(ns)) > 0 || len(validation.IsDNS1123Subdomain(name)) > 0 {
		return nil, modelNotFound(model)
	}
	if !h.allowed(r.Context(), u, "create", messagesSubresource, ns, name) {
		if h.allowed(r.Context(), u, "get", messagesSubresource, ns, name) {
			return nil, openAIErrorf(http.StatusForbidden, wire.OpenAITypePermission, wire.CodeForbidden, "model",
				"user %q may read the chat of the Dot %s but not say anything in it: that takes create on dots/messages in namespace %s (the role dots-editor)", u.GetName(), model, ns)
		}
		return nil, modelNotFound(model)
	}
	d, err := h.getDot(r.Context(), ns, name)
	if err != nil {
		var ae *apiError
		if errors.As(err, &ae) && ae.status == http.StatusNotFound {
			return nil, modelNotFound(model)
		}
		return nil, err
	}
	return d, nil
}

// chatCompletion says the newest user message of the request to the Dot
// the model names and answers with the Dot's reply: whole, or streamed as
// OpenAI's chunks (the log holds the answer whole, so the stream is a role
// chunk at once, keep-alive comments while the Dot works, then the answer's
// chunk, the finish chunk, the usage chunk when asked for, and [DONE]).
//
// The Dot's events are followed from before the message is said, so its
// answer cannot slip between the two: the answer is the first
// message.assistant after the message whose in_reply_to names it (or names
// none). A chat approval it asks for meanwhile (approval.requested of no
// task) is answered at once with a message saying so and where to answer,
// rather than waited past; the Dot's answer then goes to its own thread.
// The wait is bounded (Options.OpenAIAnswerWait); past it, the message
// stays queued and the request fails with answer_timeout. At most
// Options.OpenAIMaxWaits requests wait at once; one more is a 429, before
// anything is said.
//
// usage is the answer's spend as the log records it: spent_usd in cost and
// the reasoning tokens; the log has no prompt or completion token counts,
// so those are 0.
func (h *Handler) chatCompletion(w http.ResponseWriter, r *http.Request) error {
	if len(r.URL.Query()) > 0 {
		return openAIErrorf(http.StatusBadRequest, wire.OpenAITypeInvalidRequest, wire.CodeInvalidRequest, "", "POST /v1/chat/completions takes no query parameters")
	}
	var req wire.OpenAIChatRequest
	if err := decodeOpenAI(w, r, &req); err != nil {
		return err
	}
	if req.Model == "" {
		return openAIErrorf(http.StatusBadRequest, wire.OpenAITypeInvalidRequest, wire.CodeInvalidRequest, "model", "model is missing: it names the Dot to chat with, \"<namespace>/<name>\" (GET /v1/models lists them)")
	}
	if req.N != nil && *req.N != 1 {
		return openAIErrorf(http.StatusBadRequest, wire.OpenAITypeInvalidRequest, wire.CodeInvalidRequest, "n", "n is %d: a Dot gives one answer, so n must be 1", *req.N)
	}
	text, err := newestUserText(req.Messages)
	if err != nil {
		return err
	}
	d, err := h.chatDot(r, req.Model)
	if err != nil {
		return err
	}
	if d.DeletionTimestamp != nil {
		oe := openAIErrorf(http.StatusConflict, wire.OpenAITypeInvalidRequest, wire.CodeDotDeleting, "model", "the Dot %s is being deleted and takes no messages", req.Model)
		oe.noRetry = true // a 409 is retried by OpenAI's clients; this one stays
		return oe
	}
	if h.feed == nil {
		return openAIErrorf(http.StatusNotImplemented, wire.OpenAITypeServer, wire.CodeNotImplemented, "", "this server does not follow the event log live, so it cannot wait for a Dot's answer")
	}
	if !h.feed.available() {
		return openAIErrorf(http.StatusServiceUnavailable, wire.OpenAITypeServer, wire.CodeUnavailable, "", "the server stops; try again")
	}
	if !h.openAIWaits.TryAcquire(1) {
		w.Header().Set("Retry-After", "1")
		return openAIErrorf(http.StatusTooManyRequests, wire.OpenAITypeRateLimit, wire.OpenAICodeRateLimit, "",
			"the server waits for %d answers already, the most it holds at once; try again", h.openAIMaxWaits)
	}
	defer h.openAIWaits.Release(1)
	ctx := r.Context()
	sub, err := h.feed.subscribe(ctx, string(d.UID), []string{protocol.EventMessageAssistant, protocol.EventApprovalRequested})
	if err != nil {
		if errors.Is(err, errFeedStopped) {
			return openAIErrorf(http.StatusServiceUnavailable, wire.OpenAITypeServer, wire.CodeUnavailable, "", "the server stops; try again")
		}
		return nil // the client went
	}
	defer h.feed.unsubscribe(sub)
	posted, err := h.store.PostMessage(ctx, storeDot(d), text, store.Origin{Channel: store.ChannelAPI})
	if err != nil {
		return err
	}
	c := completion{id: fmt.Sprintf("%s%d", openAIChatIDPrefix, posted.EventID), created: posted.CreatedAt.Unix(), model: req.Model}
	wait := h.answerWait
	if wait <= 0 {
		wait = defaultOpenAIAnswerWait
	}
	// A Dot that waits for a chat approval already answers nothing before
	// a person answers that: said at once, as one asked meanwhile.
	pending, err := h.pendingChatApproval(ctx, d)
	if err != nil {
		h.log.Error(err, "could not read whether the Dot waits for an approval; waiting for its answer", "dot", req.Model)
	}
	await := func(keepAlive func() error) (chatAnswer, error) {
		if pending != nil {
			return chatAnswer{text: approvalText(d, approvalRequestOf(pending), h.webURL)}, nil
		}
		return h.awaitAnswer(ctx, sub, d, posted, wait, keepAlive)
	}
	if !req.Stream {
		a, err := await(nil)
		if err != nil {
			if ctx.Err() != nil {
				return nil // the client went; the message stays said
			}
			oe := h.asOpenAIError(r, err)
			oe.noRetry = true // the message is said: a retry would say it again
			return oe
		}
		writeJSON(w, http.StatusOK, c.whole(a))
		return nil
	}

	w.Header().Set("Content-Type", wire.StreamContentType)
	w.Header().Set("X-Accel-Buffering", "no")
	// The message is said: a client that retried would say it again.
	w.Header().Set("X-Should-Retry", "false")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	send := func(b []byte) error {
		if _, err := w.Write(b); err != nil {
			return err
		}
		return rc.Flush()
	}
	if err := send(sseData(c.chunk(wire.OpenAIChatDelta{Role: wire.OpenAIRoleAssistant, Content: new(string)}, nil, nil))); err != nil {
		return nil // the client went
	}
	a, err := await(func() error { return send([]byte(openAIKeepAlive)) })
	if err != nil {
		if ctx.Err() == nil {
			// The answer began: the failure is said in the stream, as
			// OpenAI says one.
			_ = send(sseData(h.asOpenAIError(r, err).body()))
		}
		return nil
	}
	stop := openAIFinishStop
	frames := [][]byte{
		sseData(c.chunk(wire.OpenAIChatDelta{Content: &a.text}, nil, nil)),
		sseData(c.chunk(wire.OpenAIChatDelta{}, &stop, nil)),
	}
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		u := a.usage()
		frames = append(frames, sseData(wire.OpenAIChatChunk{ID: c.id, Object: openAIObjectChunk, Created: c.created, Model: c.model, Choices: []wire.OpenAIChatChunkChoice{}, Usage: &u}))
	}
	frames = append(frames, []byte(openAIStreamDone))
	_ = send(bytes.Join(frames, nil))
	return nil
}

// decodeOpenAI reads a request body of OpenAI's, at most
// wire.MaxOpenAIChatBody bytes of one JSON object. Fields the endpoint
// does not read are read past: clients send their sampling settings.
func decodeOpenAI(w http.ResponseWriter, r *http.Request, v any) error {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			return openAIErrorf(http.StatusUnsupportedMediaType, wire.OpenAITypeInvalidRequest, wire.CodeUnsupportedMediaType, "", "the body must be application/json, not %q", ct)
		}
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, wire.MaxOpenAIChatBody))
	err := dec.Decode(v)
	if err == nil {
		if _, err = dec.Token(); errors.Is(err, io.EOF) {
			return nil
		} else if err == nil {
			err = errors.New("data after the JSON object")
		}
	}
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return openAIErrorf(http.StatusRequestEntityTooLarge, wire.OpenAITypeInvalidRequest, wire.CodeTooLarge, "", "the body is larger than %d bytes", wire.MaxOpenAIChatBody)
	case errors.Is(err, io.EOF):
		return openAIErrorf(http.StatusBadRequest, wire.OpenAITypeInvalidRequest, wire.CodeInvalidRequest, "", "the body is empty; it must be a chat completion request, a JSON object")
	}
	return openAIErrorf(http.StatusBadRequest, wire.OpenAITypeInvalidRequest, wire.CodeInvalidRequest, "", "the body is not a chat completion request: %s", strings.TrimPrefix(err.Error(), "json: "))
}

// newestUserText is the text of the newest user message: its content as a
// string, or its text parts joined by line breaks. A part that is not text
// (an image, audio, a file) is refused: a Dot is told words.
func newestUserText(messages []wire.OpenAIChatMessage) (string, error) {
	i := len(messages) - 1
	for i >= 0 && messages[i].Role != wire.OpenAIRoleUser {
		i--
	}
	if i < 0 {
		return "", openAIErrorf(http.StatusBadRequest, wire.OpenAITypeInvalidRequest, wire.OpenAICodeNoUserMessage, "messages",
			"messages holds no user message: the newest one is what the Dot is told")
	}
	param := fmt.Sprintf("messages[%d].content", i)
	raw := bytes.TrimSpace(messages[i].Content)
	var text string
	switch {
	case len(raw) > 0 && raw[0] == '"':
		if err := json.Unmarshal(raw, &text); err != nil {
			return "", openAIErrorf(http.StatusBadRequest, wire.OpenAITypeInvalidRequest, wire.CodeInvalidRequest, param, "%s is not a string: %v", param, err)
		}
	case len(raw) > 0 && raw[0] == '[':
		var parts []wire.OpenAIContentPart
		if err := json.Unmarshal(raw, &parts); err != nil {
			return "", openAIErrorf(http.StatusBadRequest, wire.OpenAITypeInvalidRequest, wire.CodeInvalidRequest, param, "%s is not an array of content parts: %v", param, err)
		}
		texts := make([]string, 0, len(parts))
		for j, p := range parts {
			if p.Type != wire.OpenAIPartText {
				return "", openAIErrorf(http.StatusBadRequest, wire.OpenAITypeInvalidRequest, wire.OpenAICodeUnsupportedContent, fmt.Sprintf("%s[%d]", param, j),
					"%s[%d] is a part of type %q: a Dot is told text only (type \"text\")", param, j, p.Type)
			}
			texts = append(texts, p.Text)
		}
		text = strings.Join(texts, "\n")
	default:
		return "", openAIErrorf(http.StatusBadRequest, wire.OpenAITypeInvalidRequest, wire.CodeInvalidRequest, param, "%s must be a string or an array of text parts", param)
	}
	if strings.TrimSpace(text) == "" {
		return "", openAIErrorf(http.StatusBadRequest, wire.OpenAITypeInvalidRequest, wire.CodeInvalidRequest, param, "%s is empty: a message needs words", param)
	}
	if len(text) > wire.MaxMessageBody {
		return "", openAIErrorf(http.StatusBadRequest, wire.OpenAITypeInvalidRequest, wire.CodeTooLarge, param, "%s is %d bytes, above %d, the most a message to a Dot holds", param, len(text), wire.MaxMessageBody)
	}
	return text, nil
}

// chatAnswer is what a chat completion answers with: the Dot's reply, or the
// words that say it waits for an approval.
type chatAnswer struct {
	text            string
	spentUSD        *float64
	reasoningTokens *int64
}

func (a chatAnswer) usage() wire.OpenAIUsage {
	var u wire.OpenAIUsage
	if a.spentUSD != nil {
		u.Cost = protocol.RoundUSD(*a.spentUSD)
	}
	if a.reasoningTokens != nil {
		u.CompletionTokensDetails = &wire.OpenAICompletionTokensDetails{ReasoningTokens: *a.reasoningTokens}
	}
	return u
}

// awaitAnswer follows sub, the Dot's answers and approval requests from
// before posted was said, until the answer to it, a chat approval asked
// after it, or the end of the wait. keepAlive, when not nil, is called
// every keep-alive period while nothing comes; its error ends the wait.
func (h *Handler) awaitAnswer(ctx context.Context, sub *subscription, d *dotsv1.Dot, posted store.PostedMessage, wait time.Duration, keepAlive func() error) (chatAnswer, error) {
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	var tick <-chan time.Time
	if keepAlive != nil {
		t := time.NewTicker(h.keepAlive)
		defer t.Stop()
		tick = t.C
	}
	for {
		frames, _ := sub.take()
		for _, f := range frames {
			if f.id <= posted.EventID {
				continue
			}
			if a, ok := h.answerOf(f, d, posted); ok {
				return a, nil
			}
		}
		select {
		case <-sub.wake:
		case <-tick:
			if err := keepAlive(); err != nil {
				return chatAnswer{}, err
			}
		case <-deadline.C:
			return chatAnswer{}, &openAIError{status: http.StatusGatewayTimeout, typ: wire.OpenAITypeTimeout, code: wire.OpenAICodeAnswerTimeout, noRetry: true,
				message: fmt.Sprintf("the Dot %s/%s did not answer within %s; the message (event %d) stays in its conversation, and its answer will be there when it comes", d.Namespace, d.Name, wait, posted.EventID)}
		case <-sub.ctx.Done():
			if ctx.Err() != nil {
				return chatAnswer{}, ctx.Err()
			}
			if errors.Is(context.Cause(sub.ctx), errFeedStopped) {
				return chatAnswer{}, &openAIError{status: http.StatusServiceUnavailable, typ: wire.OpenAITypeServer, code: wire.CodeUnavailable, noRetry: true,
					message: fmt.Sprintf("the server stops; the message (event %d) stays in the Dot's conversation, and its answer will be there", posted.EventID)}
			}
			return chatAnswer{}, fmt.Errorf("follow the answer of the Dot %s/%s to event %d: %w", d.Namespace, d.Name, posted.EventID, context.Cause(sub.ctx))
		}
	}
}

// answerOf reads f, an event of the Dot after the message: the answer to
// it, or a chat approval the Dot asks for.
func (h *Handler) answerOf(f *frame, d *dotsv1.Dot, posted store.PostedMessage) (chatAnswer, bool) {
	e, err := frameEvent(f)
	if err != nil {
		h.log.Error(err, "an event of the live feed does not read", "id", f.id)
		return chatAnswer{}, false
	}
	switch e.Type {
	case protocol.EventMessageAssistant:
		var m protocol.MessageAssistant
		if json.Unmarshal(e.Data, &m) != nil || (m.InReplyTo != nil && *m.InReplyTo != posted.MessageID) {
			return chatAnswer{}, false
		}
		return chatAnswer{text: m.Text, spentUSD: m.SpentUSD, reasoningTokens: m.ReasoningTokens}, true
	case protocol.EventApprovalRequested:
		var ar protocol.ApprovalRequested
		if json.Unmarshal(e.Data, &ar) != nil || ar.TaskID != nil {
			return chatAnswer{}, false
		}
		return chatAnswer{text: approvalText(d, ar, h.webURL)}, true
	}
	return chatAnswer{}, false
}

// pendingChatApproval is the oldest Approval of the chat (of no Task) the
// Dot d waits for, nil when none: read only when the Dot's status counts
// one pending.
func (h *Handler) pendingChatApproval(ctx context.Context, d *dotsv1.Dot) (*dotsv1.Approval, error) {
	if d.Status.PendingApprovals == 0 {
		return nil, nil
	}
	var list dotsv1.ApprovalList
	if err := h.dots.List(ctx, &list, client.InNamespace(d.Namespace), client.MatchingLabels{dotsv1.DotLabel: d.Name}); err != nil {
		return nil, fmt.Errorf("list the Approvals of the Dot %s/%s: %w", d.Namespace, d.Name, err)
	}
	var oldest *dotsv1.Approval
	for i := range list.Items {
		a := &list.Items[i]
		waits := a.Spec.Decision == "" && a.Spec.TaskName == "" && a.Spec.RequestID != "" && a.Spec.DotName == d.Name &&
			(a.Status.Phase == "" || a.Status.Phase == dotsv1.ApprovalPending) && a.DeletionTimestamp == nil
		if waits && (oldest == nil || a.CreationTimestamp.Before(&oldest.CreationTimestamp)) {
			oldest = a
		}
	}
	return oldest, nil
}

// approvalRequestOf is what a pending Approval asks, as the guest asked it.
func approvalRequestOf(a *dotsv1.Approval) protocol.ApprovalRequested {
	ar := protocol.ApprovalRequested{ApprovalID: a.Spec.RequestID, Tool: a.Spec.Tool, Permission: a.Spec.Permission, Reason: a.Spec.Reason}
	if a.Spec.Arguments != nil {
		ar.Arguments = a.Spec.Arguments.Raw
	}
	return ar
}

// approvalText says that the Dot waits for a person's approval, what it
// asks, and where to answer.
func approvalText(d *dotsv1.Dot, ar protocol.ApprovalRequested, webURL string) string {
	name := dotsv1.ApprovalName(d.Name, ar.ApprovalID)
	var b strings.Builder
	fmt.Fprintf(&b, "%s waits for an approval before it answers: it %s.\n\n", d.Name, eventtext.ApprovalLine(ar))
	b.WriteString("Answer the Approval ")
	fmt.Fprintf(&b, "%s in namespace %s", name, d.Namespace)
	if webURL != "" {
		fmt.Fprintf(&b, " in the web client's Inbox (%s/inbox), or", strings.TrimSuffix(webURL, "/"))
	}
	fmt.Fprintf(&b, " with `invisible-dots approve %s -n %s` (or `invisible-dots reject %s -n %s`), or `kubectl patch approval %s -n %s --type merge -p '{\"spec\":{\"decision\":\"approve\"}}'`.",
		name, d.Namespace, name, d.Namespace, name, d.Namespace)
	b.WriteString(" Its answer to this message will then be in its conversation.")
	return b.String()
}

// frameEvent reads the event a frame of the feed carries back from its
// data line.
func frameEvent(f *frame) (wire.StreamEvent, error) {
	var e wire.StreamEvent
	_, data, ok := bytes.Cut(f.sse, []byte("\ndata: "))
	if !ok {
		return e, fmt.Errorf("frame %d has no data", f.id)
	}
	err := json.Unmarshal(bytes.TrimRight(data, "\n"), &e)
	return e, err
}

// completion is what every chunk of one answer shares.
type completion struct {
	id      string
	created int64
	model   string
}

func (c completion) whole(a chatAnswer) wire.OpenAIChatCompletion {
	u := a.usage()
	return wire.OpenAIChatCompletion{
		ID: c.id, Object: openAIObjectChat, Created: c.created, Model: c.model,
		Choices: []wire.OpenAIChatChoice{{Message: wire.OpenAIAssistantMessage{Role: wire.OpenAIRoleAssistant, Content: a.text}, FinishReason: openAIFinishStop}},
		Usage:   &u,
	}
}

func (c completion) chunk(delta wire.OpenAIChatDelta, finish *string, usage *wire.OpenAIUsage) wire.OpenAIChatChunk {
	return wire.OpenAIChatChunk{
		ID: c.id, Object: openAIObjectChunk, Created: c.created, Model: c.model,
		Choices: []wire.OpenAIChatChunkChoice{{Delta: delta, FinishReason: finish}},
		Usage:   usage,
	}
}

// sseData is v as one server-sent event's data.
func sseData(v any) []byte {
	b, _ := json.Marshal(v) // the shapes above always encode
	return append(append([]byte("data: "), b...), '\n', '\n')
}
