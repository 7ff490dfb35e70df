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

	"github.com/sandboxer/sandboxer/internal/audit"
	"github.com/sandboxer/sandboxer/internal/policy"
	"github.com/sandboxer/sandboxer/internal/tenant"
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
		audit.NoteDecision(ctx, audit.AwaitingApproval, "approvals")
		return server.NewInputRequestBuilder(a.sign(claims)).Elicit(approvalKey, mcp.ElicitationParams{
			Mode:            "form",
			Message:         "Approve? " + what,
			RequestedSchema: approvalSchema,
		}).ToolResult(), nil
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
