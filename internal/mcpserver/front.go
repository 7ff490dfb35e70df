package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/sandboxer/sandboxer/internal/tenant"
	"github.com/sandboxer/sandboxer/internal/tools"
)

// frontHTTP answers, in front of mcp-go's Streamable HTTP server, what it
// cannot answer as it should: task requests, subscriptions/listen (an SSE
// stream until the client leaves or closing closes), and resources/read
// (whose "not found" mcp-go reports as -32603). guard has named the tenant.
func (s *Server) frontHTTP(next http.Handler, closing <-chan struct{}) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			next.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, MaxHTTPBody+1))
		r.Body = io.NopCloser(bytes.NewReader(body))
		if err != nil || len(body) > MaxHTTPBody {
			next.ServeHTTP(w, r) // it refuses what it cannot read
			return
		}
		m, ok := members(body)
		if !ok {
			next.ServeHTTP(w, r)
			return
		}
		var method string
		idSpan, hasID := m["id"]
		methodSpan, hasMethod := m["method"]
		params, hasParams := m["params"]
		if !hasID || !hasMethod || json.Unmarshal(methodSpan.of(body), &method) != nil ||
			!s.isTaskRequest(method, paramsOf(body, params, hasParams)) && method != string(mcp.MethodResourcesRead) &&
				method != string(mcp.MethodSubscriptionsListen) {
			next.ServeHTTP(w, r)
			return
		}
		id := json.RawMessage(idSpan.of(body))
		if kind := idKind(id); kind != "string" && kind != "number" {
			next.ServeHTTP(w, r) // mcp-go answers the invalid request
			return
		}
		ctx := tools.WithKeepOnCancel(r.Context())
		if t, ok := r.Context().Value(requestTenant{}).(tenant.Tenant); ok {
			ctx = tenant.With(ctx, t)
		}
		if method == string(mcp.MethodResourcesRead) {
			s.readResourceHTTP(ctx, w, body)
			return
		}
		if method == string(mcp.MethodSubscriptionsListen) {
			s.listenHTTP(ctx, w, id, append(json.RawMessage(nil), paramsOf(body, params, hasParams)...), closing)
			return
		}
		var notify notifyFunc
		if sid := r.Header.Get(server.HeaderKeySessionID); sid != "" {
			notify = func(method string, params any) {
				var m map[string]any
				if b, err := json.Marshal(params); err == nil && json.Unmarshal(b, &m) == nil {
					_ = s.mcp.SendNotificationToSpecificClient(sid, method, m)
				}
			}
		}
		res, rerr := s.handleTask(ctx, method, append(json.RawMessage(nil), paramsOf(body, params, hasParams)...), notify)
		var reply any
		status := http.StatusOK
		if rerr != nil && eraOf(paramsOf(body, params, hasParams)).modern {
			status = httpStatusFor(rerr.code) // the 2026-07-28 revision's statuses
		}
		if rerr != nil {
			reply = struct {
				JSONRPC string                  `json:"jsonrpc"`
				ID      json.RawMessage         `json:"id"`
				Error   mcp.JSONRPCErrorDetails `json:"error"`
			}{mcp.JSONRPC_VERSION, id, mcp.NewJSONRPCErrorDetails(rerr.code, rerr.msg, rerr.data)}
		} else {
			reply = struct {
				JSONRPC string          `json:"jsonrpc"`
				ID      json.RawMessage `json:"id"`
				Result  any             `json:"result"`
			}{mcp.JSONRPC_VERSION, id, res}
		}
		writeJSONStatus(w, status, reply)
	})
}

// listenHTTP serves a subscriptions/listen as an SSE response: the
// acknowledgement and the notifications as events, until the client leaves
// (no answer then) or the server closes (the closing answer, last).
func (s *Server) listenHTTP(ctx context.Context, w http.ResponseWriter, id, params json.RawMessage, closing <-chan struct{}) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	var mu sync.Mutex
	started := false
	event := func(msg any) error {
		data, err := json.Marshal(msg)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		if !started {
			w.Header().Set("Content-Type", "text/event-stream")
			w.Header().Set("Cache-Control", "no-cache")
			w.WriteHeader(http.StatusOK)
			started = true
		}
		if _, err := fmt.Fprintf(w, "event: message\ndata: %s\n\n", unescapeHTML(data)); err != nil {
			return err
		}
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		return nil
	}
	rerr := s.listen(ctx, id, params, func(method string, params map[string]any) error {
		return event(map[string]any{"jsonrpc": mcp.JSONRPC_VERSION, "method": method, "params": params})
	})
	errReply := func(rerr *rpcError) any {
		return struct {
			JSONRPC string                  `json:"jsonrpc"`
			ID      json.RawMessage         `json:"id"`
			Error   mcp.JSONRPCErrorDetails `json:"error"`
		}{mcp.JSONRPC_VERSION, id, mcp.NewJSONRPCErrorDetails(rerr.code, rerr.msg, rerr.data)}
	}
	switch {
	case rerr != nil && !started:
		writeJSONStatus(w, httpStatusFor(rerr.code), errReply(rerr))
	case rerr != nil:
		_ = event(errReply(rerr))
	case ctx.Err() == nil || closingNow(closing): // not the client's leaving
		_ = event(map[string]any{"jsonrpc": mcp.JSONRPC_VERSION, "id": id, "result": listenResult(id)})
	}
}

// closingNow says whether the server is closing.
func closingNow(closing <-chan struct{}) bool {
	select {
	case <-closing:
		return true
	default:
		return false
	}
}

// httpStatusFor is the HTTP status the 2026-07-28 revision gives a JSON-RPC
// error over Streamable HTTP (as mcp-go answers the requests it serves).
func httpStatusFor(code int) int {
	switch code {
	case mcp.METHOD_NOT_FOUND:
		return http.StatusNotFound
	case mcp.HEADER_MISMATCH, mcp.MISSING_REQUIRED_CLIENT_CAPABILITY, mcp.UNSUPPORTED_PROTOCOL_VERSION,
		mcp.INVALID_REQUEST, mcp.INVALID_PARAMS, mcp.PARSE_ERROR:
		return http.StatusBadRequest
	}
	return http.StatusOK
}

// writeJSON writes one JSON-RPC answer as an application/json response.
func writeJSON(w http.ResponseWriter, v any) { writeJSONStatus(w, http.StatusOK, v) }

// writeJSONStatus is writeJSON with an HTTP status.
func writeJSONStatus(w http.ResponseWriter, status int, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(unescapeHTML(data))
}

// readResourceHTTP has mcp-go answer a resources/read, with the error an
// OnError hook chose (resources.go) in place of its -32603.
func (s *Server) readResourceHTTP(ctx context.Context, w http.ResponseWriter, body []byte) {
	slot := &overrideSlot{}
	ctx = context.WithValue(ctx, overrideKey{}, slot)
	resp := s.mcp.HandleMessage(ctx, body)
	if e, ok := resp.(mcp.JSONRPCError); ok && slot.set {
		e.Error.Code, e.Error.Message, e.Error.Data = slot.code, slot.msg, slot.data
		resp = e
	}
	writeJSON(w, resp)
}
