package mcphost

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"strings"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/invisible-dots/invisible-dots/guest/engine/images"
	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// Dialer makes a fresh transport for one start of a server; a command's
// standard error goes to stderr.
type Dialer func(stderr io.Writer) (sdk.Transport, error)

// Backoff spaces the starts of a server that keeps failing: Initial after the
// first failure, doubled after each next one up to Max, and back to Initial
// once a start stayed connected for Stable.
type Backoff struct {
	Initial, Max, Stable time.Duration
}

// DefaultBackoff is the product's: a program that crashes at once is tried
// again after 1, 2, 4 ... seconds, at most once a minute.
var DefaultBackoff = Backoff{Initial: time.Second, Max: time.Minute, Stable: time.Minute}

func (b Backoff) delay(failures int) time.Duration {
	d := b.Initial
	for i := 1; i < failures && d < b.Max; i++ {
		d *= 2
	}
	return min(d, b.Max)
}

// StderrTail is how much of a command's standard error is kept (ref 8.3): the
// error a person and the model read is what the server wrote.
const StderrTail = 2000

// Tool is one tool of a connected server.
type Tool struct {
	Name        string // the server's own name of it
	Description string
	InputSchema json.RawMessage
}

// Status is a server's state as GET /tools shows it, with what it said at
// initialize.
type Status struct {
	State        string // protocol.MCPConnecting, MCPConnected or MCPFailed
	Error        string // why it failed, its secrets masked
	Tools        []Tool
	Instructions string
}

// CallResult is a call's outcome.
type CallResult struct {
	Text string
	OK   bool
	// Images are the images the result holds, in its order; Text says
	// nothing of them, the caller shows them (images.Attach).
	Images []images.Raw
	// Gone: the server's connection ended under the call (it crashed or
	// exited), which the server's state may not show yet.
	Gone bool
}

// Server keeps one MCP server connected: it starts it, lists its tools,
// restarts it with a backoff when it exits or its connection drops, and runs
// calls on it. A call is never repeated: a server that went away fails the
// call that found out, because the server may have run it already.
type Server struct {
	name    string
	dial    Dialer
	startup time.Duration
	timeout time.Duration
	backoff Backoff
	secrets []string // values masked in every error and result
	log     *slog.Logger
	once    bool

	mu      sync.Mutex
	st      Status
	retry   bool // failed for a reason that may go: a turn's Ready starts it again
	session *sdk.ClientSession
	stderr  *tail         // the standard error of the current start
	changed chan struct{} // closed and replaced at every change of st
	wake    chan struct{}
	cancel  context.CancelFunc
	done    chan struct{}
}

// ServerOptions make a Server.
type ServerOptions struct {
	Name string
	Dial Dialer
	// StartupTimeout bounds a start (initialize and tools/list); Timeout
	// bounds one call. Zero takes the defaults of ref 7.
	StartupTimeout, Timeout time.Duration
	Backoff                 Backoff
	// Secrets are values never shown: masked in errors, in the standard
	// error kept, and in results.
	Secrets []string
	Log     *slog.Logger
	// Once keeps a server that failed to start, or whose connection ended,
	// failed instead of starting it again: a browser identity's server ends
	// with its browser, and a browser the server lost is a closed identity,
	// never reopened behind the Dot's back (ref 5.3).
	Once bool
}

// StartServer starts keeping a server connected until Close.
func StartServer(o ServerOptions) *Server {
	s := &Server{
		name: o.Name, dial: o.Dial, startup: o.StartupTimeout, timeout: o.Timeout, backoff: o.Backoff,
		log: o.Log, once: o.Once, changed: make(chan struct{}), wake: make(chan struct{}, 1), done: make(chan struct{}),
		st: Status{State: protocol.MCPConnecting},
	}
	for _, v := range o.Secrets {
		if v != "" {
			s.secrets = append(s.secrets, v)
		}
	}
	if s.startup <= 0 {
		s.startup = time.Duration(protocol.Bounds.MCPStartupTimeoutS.Default) * time.Second
	}
	if s.timeout <= 0 {
		s.timeout = time.Duration(protocol.Bounds.MCPTimeoutS.Default) * time.Second
	}
	if s.backoff == (Backoff{}) {
		s.backoff = DefaultBackoff
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go s.run(ctx)
	return s
}

// Close stops the server and waits until its process or connection ended.
func (s *Server) Close() {
	s.cancel()
	<-s.done
}

// Status is the server's state now.
func (s *Server) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.st
	st.Tools = append([]Tool(nil), s.st.Tools...)
	return st
}

// Retry starts again at once a server that failed for a reason that may have
// gone (its program exited or was not installed), as the next turn does (ref
// 8.3), skipping what is left of its backoff. A server that did not start in
// time, or whose secret is not set, is left failed: it would hold up every
// turn otherwise.
func (s *Server) Retry() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.st.State != protocol.MCPFailed || !s.retry {
		return
	}
	s.setLocked(Status{State: protocol.MCPConnecting}, false)
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Wait returns once the server is no longer connecting, or ctx ends.
func (s *Server) Wait(ctx context.Context) {
	for {
		s.mu.Lock()
		state, ch := s.st.State, s.changed
		s.mu.Unlock()
		if state != protocol.MCPConnecting {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return
		}
	}
}

func (s *Server) setLocked(st Status, retry bool) {
	s.st, s.retry = st, retry
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *Server) set(st Status, retry bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setLocked(st, retry)
}

func (s *Server) run(ctx context.Context) {
	defer close(s.done)
	failures := 0
	for {
		s.mu.Lock()
		if s.st.State != protocol.MCPConnecting {
			s.setLocked(Status{State: protocol.MCPConnecting}, false)
		}
		s.mu.Unlock()
		sess, st, tr, err := s.start(ctx)
		if ctx.Err() != nil {
			if sess != nil {
				_ = sess.Close()
			}
			endProcess(tr)
			return
		}
		if err != nil {
			retry := true
			var notSet errNotSet
			if errors.As(err, &notSet) || errors.Is(err, errStartTimeout) {
				retry = false
			}
			failures++
			s.set(Status{State: protocol.MCPFailed, Error: s.mask(err.Error())}, retry)
			s.log.Warn("mcp server failed to start", "server", s.name, "err", s.mask(err.Error()))
			if !retry || s.once {
				// Only a change of its entry or its secrets starts it again,
				// and that makes a new Server.
				<-ctx.Done()
				return
			}
			if !s.pause(ctx, s.backoff.delay(failures)) {
				return
			}
			continue
		}
		connectedAt := time.Now()
		s.mu.Lock()
		s.session = sess
		s.setLocked(st, false)
		s.mu.Unlock()
		s.log.Info("mcp server connected", "server", s.name, "tools", len(st.Tools))

		ended := make(chan error, 1)
		go func() { ended <- sess.Wait() }()
		var werr error
		select {
		case <-ctx.Done():
			_ = sess.Close()
			<-ended
			endProcess(tr)
			return
		case werr = <-ended:
		}
		note := exitNote(tr)
		endProcess(tr)
		s.mu.Lock()
		s.session = nil
		s.mu.Unlock()
		if time.Since(connectedAt) >= s.backoff.Stable {
			failures = 0
		}
		failures++
		why := s.ended(werr, note)
		if s.once {
			s.set(Status{State: protocol.MCPFailed, Error: s.mask(why)}, false)
			s.log.Info("mcp server ended", "server", s.name, "err", s.mask(why))
			<-ctx.Done()
			return
		}
		delay := s.backoff.delay(failures)
		s.set(Status{State: protocol.MCPFailed, Error: s.mask(fmt.Sprintf("%s; started again in %s", why, delay))}, true)
		s.log.Warn("mcp server ended; restarting after a backoff", "server", s.name, "after", delay, "err", s.mask(why))
		if !s.pause(ctx, delay) {
			return
		}
	}
}

// pause waits out a backoff, cut short by Retry; false when the server is
// being closed.
func (s *Server) pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	case <-s.wake:
	}
	return true
}

var errStartTimeout = errors.New("start timed out")

// tail keeps the last StderrTail bytes a command wrote on its standard error.
type tail struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > StderrTail {
		t.buf = append([]byte(nil), t.buf[len(t.buf)-StderrTail:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.buf))
}

// start makes one connection: initialize, then the tools. It returns the
// transport, whose process (a command's) the caller ends.
func (s *Server) start(ctx context.Context) (*sdk.ClientSession, Status, sdk.Transport, error) {
	stderr := &tail{}
	s.mu.Lock()
	s.stderr = stderr
	s.mu.Unlock()
	tr, err := s.dial(stderr)
	if err != nil {
		return nil, Status{}, nil, err
	}
	// The connection lives under ctx (an SSE stream is bound to the context
	// it was opened with), so the startup timeout is a timer that cancels
	// this start rather than a deadline on the connection.
	connCtx, cancelConn := context.WithCancel(ctx)
	timedOut := make(chan struct{})
	timer := time.AfterFunc(s.startup, func() { close(timedOut); cancelConn() })
	fail := func(err error) (*sdk.ClientSession, Status, sdk.Transport, error) {
		timer.Stop()
		cancelConn()
		endProcess(tr)
		select {
		case <-timedOut:
			// A server started once (a browser's) is started again only
			// by its owner, which says so itself.
			again := ", so it is not started again until its entry or its secrets change"
			if s.once {
				again = ""
			}
			err = fmt.Errorf("%w: it did not answer within its startup_timeout_s (%s)%s%s",
				errStartTimeout, s.startup, again, stderrNote(stderr))
		default:
			err = fmt.Errorf("%v%s", err, stderrNote(stderr))
		}
		return nil, Status{}, tr, err
	}
	type started struct {
		sess  *sdk.ClientSession
		tools []Tool
		err   error
	}
	// Connect and list in a goroutine: a write to a server that reads
	// nothing does not see the context, so the timer alone may not end a
	// hung start; the caller ends the process, which ends the goroutine.
	done := make(chan started, 1)
	go func() {
		client := sdk.NewClient(&sdk.Implementation{Name: "invisible-dots", Version: "1"}, &sdk.ClientOptions{
			// A server that says its tools changed is listed again, so the
			// next turn offers what it serves now.
			ToolListChangedHandler: func(_ context.Context, req *sdk.ToolListChangedRequest) { go s.relist(req.Session) },
		})
		sess, err := client.Connect(connCtx, tr, nil)
		if err != nil {
			done <- started{err: fmt.Errorf("it could not be started: %w", err)}
			return
		}
		tools, err := listTools(connCtx, sess)
		if err != nil {
			_ = sess.Close()
			done <- started{err: err}
			return
		}
		done <- started{sess: sess, tools: tools}
	}()
	var r started
	select {
	case r = <-done:
	case <-timedOut:
		go func() {
			if r := <-done; r.sess != nil {
				_ = r.sess.Close()
			}
		}()
		return fail(errors.New("it did not start in time"))
	}
	if r.err != nil {
		return fail(r.err)
	}
	sess, tools := r.sess, r.tools
	if !timer.Stop() {
		_ = sess.Close()
		return fail(errors.New("it started too late"))
	}
	st := Status{State: protocol.MCPConnected, Tools: tools}
	if ir := sess.InitializeResult(); ir != nil {
		st.Instructions = ir.Instructions
	}
	return sess, st, tr, nil
}

// listTools reads every page of a server's tools.
func listTools(ctx context.Context, sess *sdk.ClientSession) ([]Tool, error) {
	var tools []Tool
	for t, err := range sess.Tools(ctx, nil) {
		if err != nil {
			return nil, fmt.Errorf("it did not list its tools: %w", err)
		}
		schema, err := json.Marshal(t.InputSchema)
		if err != nil || t.InputSchema == nil {
			schema = []byte(`{"type":"object"}`)
		}
		tools = append(tools, Tool{Name: t.Name, Description: t.Description, InputSchema: schema})
	}
	return tools, nil
}

// relist reads the tools of a connected server again after it said they
// changed; a list that fails keeps the tools known.
func (s *Server) relist(sess *sdk.ClientSession) {
	ctx, cancel := context.WithTimeout(context.Background(), s.startup)
	defer cancel()
	tools, err := listTools(ctx, sess)
	if err != nil {
		s.log.Warn("mcp server's tools could not be listed again", "server", s.name, "err", s.mask(err.Error()))
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.session != sess || s.st.State != protocol.MCPConnected {
		return
	}
	st := s.st
	st.Tools = tools
	s.setLocked(st, false)
}

// endProcess ends what a start left running: a command's relay, which makes
// dot-agentd end the server's process group.
func endProcess(tr sdk.Transport) {
	if p, ok := tr.(*process); ok {
		p.kill()
	}
}

// exitNote waits a moment for a command's relay to end after its connection
// did, so its whole standard error is read, and says how it ended.
func exitNote(tr sdk.Transport) string {
	p, ok := tr.(*process)
	if !ok || p.exited == nil {
		return ""
	}
	select {
	case <-p.Exited():
	case <-time.After(2 * time.Second):
		return ""
	}
	var ee *exec.ExitError
	if errors.As(p.ExitErr(), &ee) {
		return fmt.Sprintf(" (%s)", ee.ProcessState)
	}
	return ""
}

func stderrNote(t *tail) string {
	if s := t.String(); s != "" {
		return "; it wrote: " + s
	}
	return ""
}

// ended says why a connected server went away.
func (s *Server) ended(werr error, exit string) string {
	s.mu.Lock()
	stderr := s.stderr
	s.mu.Unlock()
	why := "the server ended its connection" + exit
	if werr != nil && !errors.Is(werr, io.EOF) {
		why = fmt.Sprintf("the connection to the server ended%s: %v", exit, werr)
	}
	return why + stderrNote(stderr)
}

// Call runs one tool of the server, bounded by its timeout_s.
func (s *Server) Call(ctx context.Context, tool string, args json.RawMessage) CallResult {
	s.mu.Lock()
	sess, st := s.session, s.st
	s.mu.Unlock()
	if sess == nil || st.State != protocol.MCPConnected {
		why := "it is starting"
		if st.State == protocol.MCPFailed {
			why = st.Error
		}
		return CallResult{Text: fmt.Sprintf("The MCP server %s is not connected (%s). The call did not run.", s.name, why)}
	}
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	res, err := sess.CallTool(cctx, &sdk.CallToolParams{Name: tool, Arguments: args})
	switch {
	case err != nil && ctx.Err() == nil && errors.Is(cctx.Err(), context.DeadlineExceeded):
		return CallResult{Text: fmt.Sprintf("The call to %s of the MCP server %s took longer than its timeout_s (%s) and was abandoned. "+
			"It may have taken effect; check before calling it again.", tool, s.name, s.timeout)}
	case err != nil && wentAway(err):
		return CallResult{Gone: true, Text: s.mask(fmt.Sprintf("The MCP server %s went away during the call, so its outcome is unknown and it was not repeated; "+
			"the server is started again. %s", s.name, s.ended(nil, "")))}
	case err != nil:
		return CallResult{Text: s.mask(fmt.Sprintf("The MCP server %s failed the call: %v", s.name, err))}
	}
	text, imgs := resultText(res)
	return CallResult{Text: s.mask(text), OK: !res.IsError, Images: imgs}
}

// wentAway reports an error of a call whose connection ended under it (the
// SDK reports it as a closed connection, or as the end of the stream).
func wentAway(err error) bool {
	return errors.Is(err, sdk.ErrConnectionClosed) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.ErrClosedPipe)
}

// resultText is what the model reads of a result: its text blocks as the
// server wrote them, a line for every other block but an image, and the
// images apart, which the model is shown (ref 8.3).
func resultText(r *sdk.CallToolResult) (string, []images.Raw) {
	var parts []string
	var imgs []images.Raw
	for _, c := range r.Content {
		switch c := c.(type) {
		case *sdk.TextContent:
			parts = append(parts, c.Text)
		case *sdk.ImageContent:
			imgs = append(imgs, images.Raw{MIME: c.MIMEType, Data: c.Data})
		case *sdk.AudioContent:
			parts = append(parts, fmt.Sprintf("[audio, %s, not shown]", c.MIMEType))
		case *sdk.ResourceLink:
			parts = append(parts, fmt.Sprintf("[resource %s %s]", c.Name, c.URI))
		case *sdk.EmbeddedResource:
			if c.Resource != nil && c.Resource.Text != "" {
				parts = append(parts, c.Resource.Text)
			} else if c.Resource != nil {
				parts = append(parts, fmt.Sprintf("[resource %s, %s, binary]", c.Resource.URI, c.Resource.MIMEType))
			}
		}
	}
	if len(parts) == 0 && len(imgs) == 0 && r.StructuredContent != nil {
		if b, err := json.Marshal(r.StructuredContent); err == nil {
			parts = append(parts, string(b))
		}
	}
	if len(parts) == 0 && len(imgs) == 0 {
		return "(the tool returned nothing)", nil
	}
	return strings.Join(parts, "\n"), imgs
}

// mask hides the server's secret values in text that leaves the engine (an
// error, a result, a log line).
func (s *Server) mask(text string) string {
	for _, v := range s.secrets {
		text = strings.ReplaceAll(text, v, "***")
	}
	return text
}
