package mcpserver

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/google/uuid"

	"github.com/sandboxer/sandboxer/internal/audit"
	"github.com/sandboxer/sandboxer/internal/policy"
	"github.com/sandboxer/sandboxer/internal/record"
	"github.com/sandboxer/sandboxer/internal/tenant"
	"github.com/sandboxer/sandboxer/internal/tools"
)

// Approvals a person gives (the policy's approvals key; the 2026-07-28
// revision's multi round-trip requests, SEP-2322). A call the policy holds
// answers with an InputRequiredResult: one form elicitation that names
// exactly what will run, and a request state the server signed, binding the
// tenant, the tool, the arguments, an expiry and a nonce. The client asks
// its person and calls again with the answer and the state; the state is
// checked (a tampered, expired, another call's or an already used one is
// refused) and the call runs only if the person approved. A client of an
// earlier revision is asked through elicitation/create (mcp-go bridges the
// same result); a client that cannot elicit is refused with a sentence.
// Every decision is an audit line (awaiting_approval, approved, declined).
// The signing key is this process's: a state is answered at the server that
// issued it.

// approvalKey is the inputRequests key of the approval's elicitation.
const approvalKey = "approval"

// approvalDescriptionBytes caps the command shown in a request for approval.
const approvalDescriptionBytes = 300

// approvals checks and signs requests for approval.
type approvals struct {
	pol policy.Approvals
	key []byte

	mu   sync.Mutex
	used map[string]time.Time // nonces answered, until their expiry
}

func newApprovals(pol policy.Approvals) *approvals {
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	return &approvals{pol: pol, key: key, used: map[string]time.Time{}}
}

// approvalClaims are what a request state binds.
type approvalClaims struct {
	Tenant  string `json:"t"`
	Tool    string `json:"n"`
	Args    string `json:"a"` // sha256 of the arguments' JSON
	Expires int64  `json:"e"` // unix seconds
	Nonce   string `json:"i"`
}

// needed says what of a call waits for approval: the sentence a person
// reads, or "" when nothing does.
func (a *approvals) needed(tool string, args map[string]any) string {
	var clauses []string
	if a.pol.InstallPackages && tool == "install_packages" {
		clauses = append(clauses, "install "+describePackages(args)+" into workspace "+quoted(args["workspace"]))
	}
	if hosts := stringList(args["egress"]); a.pol.Egress && len(hosts) > 0 {
		clauses = append(clauses, "reach "+strings.Join(hosts, ", ")+" through the egress proxy")
	}
	if names := stringList(args["secrets"]); a.pol.Secrets && len(names) > 0 {
		clauses = append(clauses, "use the secret(s) "+strings.Join(names, ", ")+" (put into requests to their hosts at the proxy)")
	}
	if len(clauses) == 0 {
		return ""
	}
	what := tool + " wants to " + strings.Join(clauses, "; and ")
	for _, k := range []string{"command", "code"} {
		if v, ok := args[k].(string); ok && v != "" {
			what += fmt.Sprintf(". Its %s: %s", k, truncateUTF8(v, approvalDescriptionBytes))
			break
		}
	}
	if ws, ok := args["workspace"].(string); ok && tool != "install_packages" {
		what += ". In workspace " + quoted(ws)
	}
	return what + "."
}

func describePackages(args map[string]any) string {
	var parts []string
	if pk := stringList(args["packages"]); len(pk) > 0 {
		mgr, _ := args["manager"].(string)
		if mgr == "" {
			mgr = "the workspace's language's manager"
		}
		parts = append(parts, strings.Join(pk, " ")+" with "+mgr)
	}
	if by, ok := args["by_manager"].(map[string]any); ok {
		mgrs := make([]string, 0, len(by))
		for m := range by {
			mgrs = append(mgrs, m)
		}
		sort.Strings(mgrs)
		for _, m := range mgrs {
			parts = append(parts, strings.Join(stringList(by[m]), " ")+" with "+m)
		}
	}
	if len(parts) == 0 {
		return "packages"
	}
	return strings.Join(parts, ", ")
}

func stringList(v any) []string {
	var out []string
	switch l := v.(type) {
	case []any:
		for _, e := range l {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
	case string:
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}

func quoted(v any) string {
	s, _ := v.(string)
	return fmt.Sprintf("%q", s)
}

// argsDigest is the sha256 of a call's arguments as JSON (keys sorted).
func argsDigest(args map[string]any) string {
	b, _ := json.Marshal(args)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// sign makes the request state of a call's request for approval.
func (a *approvals) sign(c approvalClaims) string {
	body, _ := json.Marshal(c)
	mac := hmac.New(sha256.New, a.key)
	mac.Write(body)
	return base64.RawURLEncoding.EncodeToString(body) + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// redeem checks a request state against the call it came back with and
// spends it: a state is good for one answer.
func (a *approvals) redeem(state string, want approvalClaims, now time.Time) error {
	b64, sig, ok := strings.Cut(state, ".")
	body, err1 := base64.RawURLEncoding.DecodeString(b64)
	mac, err2 := base64.RawURLEncoding.DecodeString(sig)
	if !ok || err1 != nil || err2 != nil {
		return errors.New("it is not one this server issued")
	}
	h := hmac.New(sha256.New, a.key)
	h.Write(body)
	if !hmac.Equal(mac, h.Sum(nil)) {
		return errors.New("its signature does not match (altered, or issued by another server process)")
	}
	var c approvalClaims
	if err := json.Unmarshal(body, &c); err != nil {
		return errors.New("it is not one this server issued")
	}
	switch {
	case c.Tenant != want.Tenant || c.Tool != want.Tool:
		return errors.New("it was issued for another call")
	case c.Args != want.Args:
		return errors.New("the arguments changed since the approval was asked for")
	case now.Unix() > c.Expires:
		return fmt.Errorf("it expired (approvals.expire_s is %d)", a.pol.ExpireS)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for n, exp := range a.used {
		if now.After(exp) {
			delete(a.used, n)
		}
	}
	if _, spent := a.used[c.Nonce]; spent {
		return errors.New("it was answered already (a request for approval is good for one answer)")
	}
	a.used[c.Nonce] = time.Unix(c.Expires, 0).Add(time.Second)
	return nil
}

// approvalSchema is the form a person answers.
var approvalSchema = map[string]any{
	"type": "object",
	"properties": map[string]any{
		"approve": map[string]any{"type": "boolean", "title": "Approve",
			"description": "true runs it as described; false refuses it"},
	},
	"required": []string{"approve"},
}

// approvalMiddleware holds the calls the policy's approvals name until a
// person approves them.
func (s *Server) approvalMiddleware(next server.ToolHandlerFunc) server.ToolHandlerFunc {
	return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		a := s.approvals
		if a == nil {
			return next(ctx, req)
		}
		args := req.GetArguments()
		what := a.needed(req.Params.Name, args)
		if what == "" {
			return next(ctx, req)
		}
		claims := approvalClaims{Tenant: tenant.Owner(ctx), Tool: req.Params.Name, Args: argsDigest(args)}
		if state := req.Params.RequestState; state != "" {
			if err := a.redeem(state, claims, time.Now()); err != nil {
				audit.NoteDecision(ctx, audit.Refused, "approvals")
				return mcp.NewToolResultError(fmt.Sprintf("requestState: the approval cannot be used: %v; call again without inputResponses and requestState to ask anew", err)), nil
			}
			if approved(req.Params.InputResponses) {
				audit.NoteDecision(ctx, audit.Approved, "approvals")
				return next(ctx, req)
			}
			audit.NoteDecision(ctx, audit.Declined, "approvals")
			return mcp.NewToolResultError(fmt.Sprintf("a person declined this call (%s)", what)), nil
		}
		if !canElicit(ctx) {
			audit.NoteDecision(ctx, audit.Refused, "approvals")
			return mcp.NewToolResultError(fmt.Sprintf("the operator requires a person's approval for this call (policy key approvals: %s), and this client cannot ask for one: it declares no elicitation capability", what)), nil
		}
		claims.Expires = time.Now().Add(time.Duration(a.pol.ExpireS) * time.Second).Unix()
		nonce := make([]byte, 16)
		_, _ = rand.Read(nonce)
		claims.Nonce = hex.EncodeToString(nonce)
		if held, ok := ctx.Value(approvedCall{}).(*record.Task); ok && held.Tool == req.Params.Name {
			// The task held for this very call was approved (tasks/update).
			audit.NoteDecision(ctx, audit.Approved, "approvals")
			return next(ctx, req)
		}
		audit.NoteDecision(ctx, audit.AwaitingApproval, "approvals")
		return server.NewInputRequestBuilder(a.sign(claims)).Elicit(approvalKey, *approvalRequest(what).Elicitation).ToolResult(), nil
	}
}

// approvalRequest is the form elicitation that asks a person to approve what.
func approvalRequest(what string) mcp.InputRequest {
	return mcp.NewElicitationInputRequest(mcp.ElicitationParams{
		Mode:            "form",
		Message:         "Approve? " + what,
		RequestedSchema: approvalSchema,
	})
}

// approvedCall, in a call's context, is the task held for it that a person
// approved: only the server puts it there (answerHeldTask).
type approvedCall struct{}

// holdAsTask, for a client of the tasks extension that can ask its person,
// holds a call the approvals name as a task in input_required: the task
// carries the request for approval (tasks/get) and takes the answer
// (tasks/update), so the call's caller is free while a person decides. It
// returns the task (nil: not held), or a refusal.
func (s *Server) holdAsTask(ctx context.Context, tool string, params json.RawMessage) (*record.Task, *rpcError) {
	if s.approvals == nil {
		return nil, nil
	}
	var p struct {
		Arguments    map[string]any `json:"arguments"`
		RequestState string         `json:"requestState"`
		Meta         struct {
			Caps *mcp.ClientCapabilities `json:"io.modelcontextprotocol/clientCapabilities"`
		} `json:"_meta"`
	}
	if json.Unmarshal(params, &p) != nil || p.RequestState != "" || p.Meta.Caps == nil || p.Meta.Caps.Elicitation == nil {
		return nil, nil // the call's own path answers (a retry with its state; a client that cannot ask)
	}
	if _, known := s.tools[tool]; !known {
		return nil, nil
	}
	what := s.approvals.needed(tool, p.Arguments)
	if what == "" {
		return nil, nil
	}
	ttl, _ := s.taskTTL(nil)
	t := &record.Task{ID: uuid.NewString(), Tool: tool, TTLMS: ttl.Milliseconds(), Status: record.TaskInputRequired,
		Message: what, Pending: append(json.RawMessage(nil), params...)}
	if err := s.deps.Jobs.CreateTask(ctx, t); err != nil {
		return nil, internalError(err)
	}
	s.auditDecision(ctx, tool, audit.AwaitingApproval, "", nil)
	return t, nil
}

// answerHeldTask takes a person's answer to a held task: an approval runs
// the call it holds (its job becomes the task's, or the server runs it); a
// decline ends it completed with the call's refusal as its result. An
// approval that came after approvals.expire_s ends it failed.
func (s *Server) answerHeldTask(ctx context.Context, t *record.Task, yes bool) *rpcError {
	if !yes {
		res, _ := json.Marshal(mcp.NewToolResultError(fmt.Sprintf("a person declined this call (%s)", t.Message)))
		if _, err := s.deps.Jobs.EndTask(ctx, t.ID, record.TaskCompleted, "a person declined it", res); err != nil {
			return internalError(err)
		}
		s.auditDecision(ctx, t.Tool, audit.Declined, "", nil)
		return nil
	}
	msg, err := toolCallMessage(t.Pending)
	if err != nil {
		return internalError(err)
	}
	runCtx := context.WithValue(context.WithoutCancel(ctx), approvedCall{}, t)
	if tool := s.tools[t.Tool]; tool.TaskResult != nil {
		call := &tools.TaskCall{TTLMS: t.TTLMS}
		resp := s.mcp.HandleMessage(tools.WithTask(runCtx, call), msg)
		if call.JobID == "" {
			res, _ := callResult(resp)
			data, _ := json.Marshal(res)
			_, err := s.deps.Jobs.EndTask(ctx, t.ID, record.TaskCompleted, truncate(tools.ResultText(res), 200), data)
			if err != nil {
				return internalError(err)
			}
			return nil
		}
		if _, err := s.deps.Jobs.ResumeTask(ctx, t.ID, call.JobID); err != nil {
			return internalError(err)
		}
		return nil
	}
	if ok, err := s.deps.Jobs.ResumeTask(ctx, t.ID, ""); err != nil || !ok {
		if err != nil {
			return internalError(err)
		}
		return nil // answered already
	}
	s.runInServer(runCtx, t, msg, nil)
	return nil
}

// expireHeld ends, as failed, a held task no person answered within
// approvals.expire_s, and returns the task as it is now.
func (s *Server) expireHeld(ctx context.Context, t *record.Task) (*record.Task, *rpcError) {
	if t.Status != record.TaskInputRequired || s.approvals == nil ||
		time.Since(t.CreatedAt) <= time.Duration(s.approvals.pol.ExpireS)*time.Second {
		return t, nil
	}
	msg := fmt.Sprintf("no approval came within approvals.expire_s (%d s); call again to ask anew", s.approvals.pol.ExpireS)
	if ended, err := s.deps.Jobs.EndTask(ctx, t.ID, record.TaskFailed, msg, nil); err != nil {
		return nil, internalError(err)
	} else if ended {
		s.auditDecision(ctx, t.Tool, audit.Refused, "", errors.New(msg))
	}
	next, err := s.deps.Jobs.Task(ctx, t.ID)
	if err != nil {
		return nil, internalError(err)
	}
	return next, nil
}

// auditDecision writes an audit line of an approval's decision made
// outside a tool call (a held task's).
func (s *Server) auditDecision(ctx context.Context, tool, decision, jobID string, err error) {
	if s.audit == nil {
		return
	}
	e := audit.Entry{Time: time.Now(), Client: tools.ClientName(ctx), Tenant: tenant.Owner(ctx), Server: s.serverID,
		Tool: tool, JobID: jobID, Outcome: "ok", Decision: decision, Rule: "approvals"}
	if err != nil {
		e.Outcome, e.Error = "error", truncateUTF8(err.Error(), 1000)
	}
	if werr := s.audit.Write(e); werr != nil && s.logf != nil {
		s.logf("audit log: %v", werr)
	}
}

// approved says whether the approval's answer accepts with approve true.
func approved(responses mcp.InputResponses) bool {
	r, ok := responses[approvalKey]
	if !ok {
		return false
	}
	if r.Elicitation == nil && r.DecodeFor(mcp.MethodElicitationCreate) != nil {
		return false
	}
	if r.Elicitation == nil || r.Elicitation.Action != mcp.ElicitationResponseActionAccept {
		return false
	}
	content, _ := r.Elicitation.Content.(map[string]any)
	yes, _ := content["approve"].(bool)
	return yes
}

// canElicit says whether the caller's client can ask its person: it
// declared the elicitation capability (on the request in the 2026-07-28
// revision, at initialize before).
func canElicit(ctx context.Context) bool {
	if info := server.RequestProtocolInfoFromContext(ctx); info != nil && info.Modern {
		return info.ClientCapabilities != nil && info.ClientCapabilities.Elicitation != nil
	}
	if sess, ok := server.ClientSessionFromContext(ctx).(server.SessionWithClientInfo); ok {
		return sess.GetClientCapabilities().Elicitation != nil
	}
	return false
}
