package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/sandboxer/sandboxer/internal/observe"
	"github.com/sandboxer/sandboxer/internal/tenant"
	"github.com/sandboxer/sandboxer/internal/tools"
)

// wire is a thin JSON-RPC layer between the stdio streams and mcp-go's stdio
// transport. It does what mcp-go (v1.2.1) does not:
//
//   - Ids exactly. mcp-go decodes a request id into `any` (a JSON number
//     becomes a float64; mcp.RequestId turns it into int64 or float64), so
//     9007199254740993 comes back as 9007199254740992, and it serves requests
//     whose id is an object, an array, a boolean or null. Here every request
//     id is replaced, on the way in, by a string token ("sbx~N"), and the
//     original bytes are put back, byte for byte, on the way out (results and
//     errors alike). A request whose id is not a string or a number is
//     answered with -32600 (Invalid Request, id null) and never reaches mcp-go.
//     notifications/cancelled names the request by its original id: its
//     requestId is rewritten to the token, so mcp-go still finds the call.
//     Messages without a method (responses to our own requests) pass as they are.
//   - The initialize handshake. mcp-go serves tools/call, tools/list … before
//     initialize (its stdio session is even a process-wide singleton). Here,
//     until an initialize request has been answered with a result, a request
//     other than initialize, ping and server/discover is refused with -32600.
//     The 2026-07-28 revision is stateless and has no initialize: such a
//     request announces itself by carrying its protocol version in
//     params._meta["io.modelcontextprotocol/protocolVersion"] (together with
//     "io.modelcontextprotocol/clientCapabilities", which mcp-go requires, see
//     server/protocol.go extractRequestProtocolInfo); a request whose version
//     there is 2026-07-28 or later (mcp.IsModernProtocol) is let through.
//   - Cancellation reasons. mcp-go cancels a call's context on
//     notifications/cancelled but drops the reason. Here the reason is kept
//     per request, and the tool-handler middleware (toolMiddleware) turns it
//     into the context's cause, read with tools.CancelReason. To find its
//     request, a tools/call gets its token in params._meta[requestTokenKey].
//   - No HTML escaping. mcp-go writes each message with json.Marshal, which
//     escapes <, > and & as \u003c, \u003e, \u0026; they are put back as the
//     characters themselves (the same JSON value, as a client reads it).
//   - Error codes a handler cannot choose: mcp-go reports any resource
//     handler error as -32603; override replaces a response by another error
//     (used for an unknown job resource, -32002).
//
// mcp-go writes each message with one Write of one line; so does wire.
type wire struct {
	out   io.Writer
	outMu sync.Mutex

	mu          sync.Mutex
	seq         uint64
	ids         map[string]json.RawMessage // token → the request's original id
	latest      map[string]string          // original id (canonical) → its newest token
	reasons     map[string]string          // token → cancellation reason
	overrides   map[string]mcp.JSONRPCErrorDetails
	initTokens  map[string]bool // tokens of initialize requests
	initialized atomic.Bool
	// timelines are the tools/calls' timelines by token, from their line's
	// arrival to their answer's write; kept only when trace is set.
	timelines map[string]*observe.Timeline
	// trace hears each tools/call's timeline once its answer is written
	// (WithCallTimelines); nil: none are kept.
	trace func(*observe.Timeline)
	// tasks answers MCP task requests (tasks.go) in front of mcp-go; nil:
	// they go to mcp-go.
	tasks  func(method string, params json.RawMessage, notify notifyFunc) (any, *rpcError)
	isTask func(method string, params []byte) bool // which requests tasks answers
	// listen serves subscriptions/listen (listen.go) until its context ends;
	// nil: mcp-go answers it. listening holds each open listen's cancel, by
	// its id (canonical), for notifications/cancelled.
	listen    func(ctx context.Context, id, params json.RawMessage, send sendFunc) *rpcError
	listening map[string]context.CancelFunc
}

const (
	tokenPrefix = "sbx~"
	// requestTokenKey carries a tools/call's token in params._meta, for
	// toolMiddleware. (Not under the reserved io.modelcontextprotocol/ prefix.)
	requestTokenKey = "dev.sandboxer/request"
	metaVersionKey  = mcp.MetaKeyProtocolVersion
)

func newWire() *wire {
	return &wire{
		ids: map[string]json.RawMessage{}, latest: map[string]string{}, reasons: map[string]string{},
		overrides: map[string]mcp.JSONRPCErrorDetails{}, initTokens: map[string]bool{},
		timelines: map[string]*observe.Timeline{}, listening: map[string]context.CancelFunc{},
	}
}

// reader wraps stdin: lines pass through the line limiter, then wire.inbound.
func (w *wire) reader(r io.Reader, max int) io.Reader {
	return &inboundReader{l: newLineLimiter(r, max).(*lineLimiter), w: w}
}

type inboundReader struct {
	l       *lineLimiter
	w       *wire
	pending []byte
}

func (r *inboundReader) Read(p []byte) (int, error) {
	for len(r.pending) == 0 {
		line, err := r.l.readLine()
		if len(line) == 0 && err != nil {
			return 0, err
		}
		r.pending = r.w.inbound(line)
	}
	n := copy(p, r.pending)
	r.pending = r.pending[n:]
	return n, nil
}

// span is where a member's value lies in a JSON object.
type span struct{ start, end int }

// members returns the byte spans of a JSON object's top-level members' values
// (the last one wins for a repeated name, as in encoding/json).
func members(data []byte) (map[string]span, bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, false
	}
	m := map[string]span{}
	for dec.More() {
		tok, err := dec.Token()
		key, ok := tok.(string)
		if err != nil || !ok {
			return nil, false
		}
		off := int(dec.InputOffset())
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, false
		}
		end := int(dec.InputOffset())
		start := off
		for start < end && (data[start] == ':' || isSpace(data[start])) {
			start++
		}
		m[key] = span{start, end}
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return nil, false
	}
	return m, true
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func (s span) of(data []byte) []byte { return data[s.start:s.end] }

// idKind classifies a raw JSON id: "string", "number" or what else it is.
func idKind(raw []byte) string {
	if len(raw) == 0 {
		return "nothing"
	}
	switch c := raw[0]; {
	case c == '"':
		return "string"
	case c == '-' || (c >= '0' && c <= '9'):
		return "number"
	case c == '{':
		return "an object"
	case c == '[':
		return "an array"
	case c == 't' || c == 'f':
		return "a boolean"
	case c == 'n':
		return "null"
	}
	return "not a JSON value"
}

// canonical is an id's identity for matching a cancellation to its request.
func canonical(raw []byte) (string, bool) {
	switch idKind(raw) {
	case "string":
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return "", false
		}
		return "s:" + s, true
	case "number":
		return "n:" + string(raw), true
	}
	return "", false
}

// inbound rewrites one line from the client for mcp-go; nil means the line
// was answered here and mcp-go does not see it.
func (w *wire) inbound(line []byte) []byte {
	arrived := time.Now()
	m, ok := members(line)
	if !ok {
		return line // not a JSON object: mcp-go answers the parse error
	}
	methodSpan, hasMethod := m["method"]
	if !hasMethod {
		return line // a response to a request of ours, or nonsense mcp-go refuses
	}
	var method string
	if json.Unmarshal(methodSpan.of(line), &method) != nil {
		return line
	}
	idSpan, hasID := m["id"]
	if !hasID {
		if method == string(mcp.MethodNotificationCancelled) {
			return w.cancelled(line, m)
		}
		return line
	}
	rawID := idSpan.of(line)
	kind := idKind(rawID)
	if kind != "string" && kind != "number" {
		w.reply(nil, mcp.INVALID_REQUEST, fmt.Sprintf("Invalid Request: the id of a %s request must be a string or a number, not %s", truncate(method, 64), kind))
		return nil
	}
	params, hasParams := m["params"]
	if !w.initialized.Load() && !preInitialize(method) && !(hasParams && modern(params.of(line))) {
		w.reply(rawID, mcp.INVALID_REQUEST, fmt.Sprintf(
			"%s before initialize: send initialize (and notifications/initialized) first, or use the stateless 2026-07-28 revision with %q in params._meta",
			truncate(method, 64), metaVersionKey))
		return nil
	}

	if w.listen != nil && method == string(mcp.MethodSubscriptionsListen) {
		w.startListen(append(json.RawMessage(nil), rawID...), append(json.RawMessage(nil), paramsOf(line, params, hasParams)...))
		return nil
	}
	if w.tasks != nil && w.isTask(method, paramsOf(line, params, hasParams)) {
		p := append(json.RawMessage(nil), paramsOf(line, params, hasParams)...)
		go w.answerTask(append(json.RawMessage(nil), rawID...), method, p)
		return nil
	}

	w.mu.Lock()
	w.seq++
	token := tokenPrefix + strconv.FormatUint(w.seq, 10)
	w.ids[token] = append(json.RawMessage(nil), rawID...)
	if key, ok := canonical(rawID); ok {
		w.latest[key] = token
	}
	if method == string(mcp.MethodInitialize) {
		w.initTokens[token] = true
	}
	if w.trace != nil && method == string(mcp.MethodToolsCall) {
		w.timelines[token] = observe.NewTimeline(arrived)
	}
	w.mu.Unlock()

	quoted := []byte(strconv.Quote(token))
	out := make([]byte, 0, len(line)+len(quoted)+len(requestTokenKey)+16)
	if method == string(mcp.MethodToolsCall) && hasParams {
		// Both edits, the later one in the line first.
		withToken := injectMetaToken(line, params, quoted)
		if params.start > idSpan.start {
			out = append(out, line[:idSpan.start]...)
			out = append(out, quoted...)
			out = append(out, line[idSpan.end:params.start]...)
			out = append(out, withToken...)
			out = append(out, line[params.end:]...)
		} else {
			out = append(out, line[:params.start]...)
			out = append(out, withToken...)
			out = append(out, line[params.end:idSpan.start]...)
			out = append(out, quoted...)
			out = append(out, line[idSpan.end:]...)
		}
		return out
	}
	out = append(out, line[:idSpan.start]...)
	out = append(out, quoted...)
	out = append(out, line[idSpan.end:]...)
	return out
}

// preInitialize: the requests a client may send before initialize.
func preInitialize(method string) bool {
	switch mcp.MCPMethod(method) {
	case mcp.MethodInitialize, mcp.MethodPing, mcp.MethodServerDiscover:
		return true
	}
	return false
}

// modern says whether params declare the stateless 2026-07-28 revision.
func modern(params []byte) bool {
	pm, ok := members(params)
	if !ok {
		return false
	}
	metaSpan, ok := pm["_meta"]
	if !ok {
		return false
	}
	meta, ok := members(metaSpan.of(params))
	if !ok {
		return false
	}
	v, ok := meta[metaVersionKey]
	if !ok {
		return false
	}
	var version string
	return json.Unmarshal(v.of(metaSpan.of(params)), &version) == nil && mcp.IsModernProtocol(version)
}

// injectMetaToken returns the params value with requestTokenKey set in its
// _meta (added when missing); unchanged when params or _meta is no object.
func injectMetaToken(line []byte, params span, quoted []byte) []byte {
	return injectMetaTokenKey(line, params, []byte(strconv.Quote(requestTokenKey)), quoted)
}

func injectMetaTokenKey(line []byte, params span, key, quoted []byte) []byte {
	p := params.of(line)
	pm, ok := members(p)
	if !ok {
		return p
	}
	entry := append(append(append([]byte(nil), key...), ':'), quoted...)
	if metaSpan, ok := pm["_meta"]; ok {
		meta := metaSpan.of(p)
		if _, ok := members(meta); !ok {
			return p
		}
		return insertIntoObject(p, metaSpan.start, entry)
	}
	return insertIntoObject(p, 0, append(append([]byte(`"_meta":{`), entry...), '}'))
}

// insertIntoObject inserts a member right after the '{' at obj[at].
func insertIntoObject(obj []byte, at int, member []byte) []byte {
	rest := bytes.TrimLeft(obj[at+1:], " \t\r\n")
	out := make([]byte, 0, len(obj)+len(member)+1)
	out = append(out, obj[:at+1]...)
	out = append(out, member...)
	if len(rest) > 0 && rest[0] != '}' {
		out = append(out, ',')
	}
	return append(out, obj[at+1:]...)
}

// cancelled records a cancellation's reason and points it at the request's token.
func (w *wire) cancelled(line []byte, m map[string]span) []byte {
	ps, ok := m["params"]
	if !ok {
		return line
	}
	var params map[string]json.RawMessage
	if json.Unmarshal(ps.of(line), &params) != nil {
		return line
	}
	key, ok := canonical(bytes.TrimSpace(params["requestId"]))
	if !ok {
		return line
	}
	var reason string
	_ = json.Unmarshal(params["reason"], &reason)
	w.mu.Lock()
	if stop, listening := w.listening[key]; listening {
		delete(w.listening, key)
		w.mu.Unlock()
		stop() // a listen ends without an answer
		return nil
	}
	token, known := w.latest[key]
	if known {
		w.reasons[token] = reason
	}
	w.mu.Unlock()
	if !known {
		return line
	}
	params["requestId"], _ = json.Marshal(token)
	data, err := json.Marshal(map[string]any{"jsonrpc": mcp.JSONRPC_VERSION, "method": mcp.MethodNotificationCancelled, "params": params})
	if err != nil {
		return line
	}
	return append(data, '\n')
}

// reason returns the cancellation reason recorded for a token, and whether
// the client cancelled that request at all.
func (w *wire) reason(token string) (string, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	r, ok := w.reasons[token]
	return r, ok
}

// override makes the response to the request with this token an error.
func (w *wire) override(id any, code int, message string, data any) {
	token, ok := id.(string)
	if !ok {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, known := w.ids[token]; known {
		w.overrides[token] = mcp.NewJSONRPCErrorDetails(code, message, data)
	}
}

// reply writes an error response from the wire itself (id nil = null).
func (w *wire) reply(id json.RawMessage, code int, message string) {
	w.replyData(id, code, message, nil)
}

// replyData is reply with the error's data member.
func (w *wire) replyData(id json.RawMessage, code int, message string, detail any) {
	if id == nil {
		id = json.RawMessage("null")
	}
	data, err := json.Marshal(struct {
		JSONRPC string                  `json:"jsonrpc"`
		ID      json.RawMessage         `json:"id"`
		Error   mcp.JSONRPCErrorDetails `json:"error"`
	}{mcp.JSONRPC_VERSION, id, mcp.NewJSONRPCErrorDetails(code, message, detail)})
	if err != nil {
		return
	}
	_, _ = w.writeLine(append(data, '\n'))
}

// answerTask answers a task request on its own (tasks/result may wait for
// the job's end), with the request's id as it came.
func (w *wire) answerTask(id json.RawMessage, method string, params json.RawMessage) {
	res, rerr := w.tasks(method, params, w.notify)
	if rerr != nil {
		w.replyData(id, rerr.code, rerr.msg, rerr.data)
		return
	}
	w.answer(id, res)
}

// startListen serves a subscriptions/listen on its own until the client
// cancels it (no answer then) or the server stops (the closing answer).
func (w *wire) startListen(id, params json.RawMessage) {
	key, ok := canonical(id)
	if !ok {
		w.reply(id, mcp.INVALID_REQUEST, "subscriptions/listen: the request's id cannot name a subscription")
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	w.mu.Lock()
	if _, dup := w.listening[key]; dup {
		w.mu.Unlock()
		cancel()
		w.reply(id, mcp.INVALID_REQUEST, "subscriptions/listen: a listen with this id is open already")
		return
	}
	w.listening[key] = cancel
	w.mu.Unlock()
	go func() {
		defer cancel()
		rerr := w.listen(ctx, id, params, func(method string, params map[string]any) error {
			return w.notifyErr(method, params)
		})
		w.mu.Lock()
		_, open := w.listening[key] // false: the client cancelled it
		delete(w.listening, key)
		w.mu.Unlock()
		switch {
		case rerr != nil:
			w.replyData(id, rerr.code, rerr.msg, rerr.data)
		case open:
			w.answer(id, listenResult(id))
		}
	}()
}

// answer writes a result of the wire's own.
func (w *wire) answer(id json.RawMessage, res any) {
	data, err := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Result  any             `json:"result"`
	}{mcp.JSONRPC_VERSION, id, res})
	if err != nil {
		w.reply(id, mcp.INTERNAL_ERROR, err.Error())
		return
	}
	_, _ = w.writeLine(append(unescapeHTML(data), '\n'))
}

// notify writes a notification of the server's own.
func (w *wire) notify(method string, params any) { _ = w.notifyErr(method, params) }

// notifyErr is notify, saying whether the notification was written.
func (w *wire) notifyErr(method string, params any) error {
	data, err := json.Marshal(struct {
		JSONRPC string `json:"jsonrpc"`
		Method  string `json:"method"`
		Params  any    `json:"params"`
	}{mcp.JSONRPC_VERSION, method, params})
	if err != nil {
		return err
	}
	_, err = w.writeLine(append(unescapeHTML(data), '\n'))
	return err
}

var responsePrefix = []byte(`{"jsonrpc":"2.0","id":"` + tokenPrefix)

// Write is the transport's output: one message per call.
func (w *wire) Write(p []byte) (int, error) {
	line := p
	var tl *observe.Timeline
	if bytes.HasPrefix(p, responsePrefix) {
		line, tl = w.restore(p)
	}
	if _, err := w.writeLine(unescapeHTML(line)); err != nil {
		return 0, err
	}
	if tl != nil {
		tl.Mark("answer_written")
		w.trace(tl)
	}
	return len(p), nil
}

func (w *wire) writeLine(line []byte) (int, error) {
	w.outMu.Lock()
	defer w.outMu.Unlock()
	return w.out.Write(line)
}

// restore puts a response's original id back (and applies an override);
// it hands over the call's timeline, if one was kept.
func (w *wire) restore(p []byte) ([]byte, *observe.Timeline) {
	start := len(responsePrefix) - len(tokenPrefix) - 1 // the opening quote
	end := bytes.IndexByte(p[start+1:], '"')
	if end < 0 {
		return p, nil
	}
	end += start + 2
	token := string(p[start+1 : end-1])
	w.mu.Lock()
	orig, known := w.ids[token]
	ov, overridden := w.overrides[token]
	isInit := w.initTokens[token]
	tl := w.timelines[token]
	if known {
		delete(w.timelines, token)
		delete(w.ids, token)
		delete(w.overrides, token)
		delete(w.reasons, token)
		delete(w.initTokens, token)
		if key, ok := canonical(orig); ok && w.latest[key] == token {
			delete(w.latest, key)
		}
	}
	w.mu.Unlock()
	if !known {
		return p, nil
	}
	if overridden {
		data, err := json.Marshal(struct {
			JSONRPC string                  `json:"jsonrpc"`
			ID      json.RawMessage         `json:"id"`
			Error   mcp.JSONRPCErrorDetails `json:"error"`
		}{mcp.JSONRPC_VERSION, orig, ov})
		if err == nil {
			return append(data, '\n'), tl
		}
	}
	if isInit && bytes.HasPrefix(p[end:], []byte(`,"result":`)) {
		// Set before the answer is written: a client that has read it may go on.
		w.initialized.Store(true)
	}
	out := make([]byte, 0, len(p)+len(orig))
	out = append(out, p[:start]...)
	out = append(out, orig...)
	return append(out, p[end:]...), tl
}

// unescapeHTML undoes encoding/json's HTML escaping (\u003c, \u003e, \u0026)
// in a JSON text. An escape starts at a backslash that is not itself escaped;
// scanning escape by escape keeps "\\u003c" (a backslash, then "u003c") as it is.
func unescapeHTML(b []byte) []byte {
	if !bytes.Contains(b, []byte(`\u00`)) {
		return b
	}
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c != '\\' || i+1 >= len(b) {
			out = append(out, c)
			continue
		}
		if b[i+1] == 'u' && i+6 <= len(b) {
			switch string(b[i+2 : i+6]) {
			case "003c", "003C":
				out = append(out, '<')
				i += 5
				continue
			case "003e", "003E":
				out = append(out, '>')
				i += 5
				continue
			case "0026":
				out = append(out, '&')
				i += 5
				continue
			}
		}
		out = append(out, c, b[i+1])
		i++
	}
	return out
}

// toolMiddleware gives each tool call a context whose cause, once the client
// cancels the call, is a *tools.CancelledError with the reason it gave. (The
// context mcp-go hands a handler is cancelled with plain context.Canceled.)
func (w *wire) toolMiddleware(next server.ToolHandlerFunc) server.ToolHandlerFunc {
	return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var token string
		if req.Params.Meta != nil {
			token, _ = req.Params.Meta.AdditionalFields[requestTokenKey].(string)
			delete(req.Params.Meta.AdditionalFields, requestTokenKey)
		}
		if token == "" { // over HTTP: the timeline starts and ends here
			if w.trace == nil {
				return next(ctx, req)
			}
			tl := observe.NewTimeline(time.Now())
			res, err := next(w.timed(ctx, tl, req), req)
			tl.Mark("handler_returned")
			w.trace(tl)
			return res, err
		}
		w.mu.Lock()
		tl := w.timelines[token]
		w.mu.Unlock()
		if tl != nil {
			ctx = w.timed(ctx, tl, req)
		}
		inner, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
		defer cancel(nil)
		stop := context.AfterFunc(ctx, func() {
			// mcp-go cancels a call's context for notifications/cancelled and
			// when the session ends; only the former was recorded here.
			cause := context.Cause(ctx)
			if reason, cancelled := w.reason(token); cancelled {
				cause = &tools.CancelledError{Reason: reason}
			}
			cancel(cause)
		})
		defer stop()
		res, err := next(inner, req)
		tl.Mark("handler_returned")
		return res, err
	}
}

// timed puts a call's timeline in its context: the handler's mark, the
// tool, the tenant, and the W3C trace context the client sent in _meta.
func (w *wire) timed(ctx context.Context, tl *observe.Timeline, req mcp.CallToolRequest) context.Context {
	tl.Mark("handler")
	tl.Note("tool", req.Params.Name)
	if t, ok := tenant.From(ctx); ok && t.Name != "" {
		tl.Note("tenant", t.Name)
	}
	if req.Params.Meta != nil {
		for _, k := range []string{"traceparent", "tracestate"} {
			if v, ok := req.Params.Meta.AdditionalFields[k].(string); ok && len(v) <= 512 {
				tl.Note(k, v)
			}
		}
	}
	return observe.WithTimeline(ctx, tl)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// paramsOf is a request's params, or nil when it has none.
func paramsOf(line []byte, params span, has bool) []byte {
	if !has {
		return nil
	}
	return params.of(line)
}
