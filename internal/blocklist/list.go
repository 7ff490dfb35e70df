package blocklist

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"sync"
	"time"
	"unicode"

	"github.com/sandboxer/sandboxer/internal/observe"
	"github.com/sandboxer/sandboxer/internal/record"
	"github.com/sandboxer/sandboxer/internal/tenant"
)

// Store keeps the entries agents add (the store's blocked_commands table).
type Store interface {
	BlockedCommands(ctx context.Context) ([]record.BlockedCommand, error)
	PutBlockedCommand(ctx context.Context, b record.BlockedCommand) (bool, error)
	DeleteBlockedCommand(ctx context.Context, tenant, command string) (bool, error)
}

// Errors of edits; their texts are sentences an agent can act on.
var (
	ErrEditsOff     = errors.New("the operator does not allow agents to edit the block list (policy block.agent_edits, flag --allow-block-edits)")
	ErrPolicyEntry  = errors.New("is on the block list by the operator's policy (block.commands); an agent cannot remove it")
	ErrNotBlocked   = errors.New("is not on the block list; list_blocked_commands shows the list")
	ErrAdminEntry   = errors.New("is on the block list for every tenant, by an admin; only an admin can remove it")
	ErrBadName      = errors.New("must be a command name: 1 to 64 characters of letters, digits, '.', '_', '+' and '-', not starting with '.', '-' or '+', no path (/usr/bin/rm is blocked as rm)")
	ErrBadReason    = errors.New("reason must be at most 500 characters, without control characters")
	maxReasonLength = 500
)

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._+-]{0,63}$`)

// ValidName reports whether s can be a block-list entry.
func ValidName(s string) bool { return nameRE.MatchString(s) }

// refreshEvery is how stale the agent entries may be: several servers share a
// state directory, and one's edit reaches the others within this time.
const refreshEvery = time.Second

// Listed is an entry with its history.
type Listed struct {
	Entry
	// Tenant is the tenant an agent's entry applies to ("" every tenant:
	// the policy's, or an admin's).
	Tenant  string
	AddedBy string
	AddedAt time.Time
}

// List is the block list in force: the policy's entries plus those agents
// added (kept in the store, so they survive restarts). An agent's entry is
// its tenant's and applies to that tenant only; an admin's applies to
// every tenant, as the policy's do. Safe for concurrent use.
type List struct {
	observer observe.Observer // told of every decision

	policy map[string]Entry
	st     Store
	edits  bool

	mu     sync.Mutex
	agent  map[string]map[string]Listed // tenant ("" for all) → command → entry
	loaded time.Time
}

// New returns the list for the policy's commands; st may be nil (no agent
// entries, no edits). agentEdits is whether agents may edit the list.
func New(policyCommands []string, st Store, agentEdits bool, o observe.Observer) (*List, error) {
	l := &List{policy: map[string]Entry{}, st: st, edits: agentEdits && st != nil, observer: observe.Or(o)}
	for _, c := range policyCommands {
		if !ValidName(c) {
			return nil, fmt.Errorf("block.commands: %q %v", c, ErrBadName)
		}
		l.policy[c] = Entry{Command: c, Source: SourcePolicy, Reason: "operator policy"}
	}
	if st != nil {
		if err := l.reload(context.Background()); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// EditsAllowed reports whether agents may add and remove entries.
func (l *List) EditsAllowed() bool { return l != nil && l.edits }

func (l *List) reload(ctx context.Context) error {
	bs, err := l.st.BlockedCommands(ctx)
	if err != nil {
		return err
	}
	agent := map[string]map[string]Listed{}
	for _, b := range bs {
		if agent[b.Tenant] == nil {
			agent[b.Tenant] = map[string]Listed{}
		}
		agent[b.Tenant][b.Command] = Listed{Entry: Entry{Command: b.Command, Reason: b.Reason, Source: SourceAgent},
			Tenant: b.Tenant, AddedBy: b.AddedBy, AddedAt: b.AddedAt}
	}
	l.mu.Lock()
	l.agent, l.loaded = agent, time.Now()
	l.mu.Unlock()
	return nil
}

// current returns the entries in force for ctx's tenant, reloading agent
// entries when stale.
func (l *List) current(ctx context.Context) map[string]Listed {
	if l.st != nil {
		l.mu.Lock()
		stale := time.Since(l.loaded) > refreshEvery
		l.mu.Unlock()
		if stale {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_ = l.reload(ctx) // on a store error the last list read stays in force
			cancel()
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	m := make(map[string]Listed, len(l.policy))
	for k, v := range l.agent[tenant.Owner(ctx)] {
		m[k] = v
	}
	for k, v := range l.agent[""] { // an admin's entry wins over a tenant's own
		m[k] = v
	}
	for k, v := range l.policy { // the policy's entry wins a name both hold
		m[k] = Listed{Entry: v}
	}
	return m
}

// rules are the entries of ctx's tenant's list, as Check takes them.
func (l *List) rules(ctx context.Context) map[string]Entry {
	cur := l.current(ctx)
	m := make(map[string]Entry, len(cur))
	for k, v := range cur {
		m[k] = v.Entry
	}
	return m
}

// Check decides whether script may run under the list in force for ctx's
// tenant; see the package comment for what it sees. A nil List allows
// everything.
func (l *List) Check(ctx context.Context, script string) (Decision, error) {
	if l == nil {
		return Decision{Allowed: true}, nil
	}
	return l.observe(Check(script, l.rules(ctx)))
}

// CheckStdin is Check for a script given stdin (see the package function).
func (l *List) CheckStdin(ctx context.Context, script, stdin string) (Decision, error) {
	if l == nil {
		return Decision{Allowed: true}, nil
	}
	return l.observe(CheckStdin(script, stdin, l.rules(ctx)))
}

// observe tells Observe of a decision reached (a script that does not parse
// is refused without one).
func (l *List) observe(d Decision, err error) (Decision, error) {
	if err == nil {
		l.observer.BlockDecision(!d.Allowed, d.Rule.Command)
	}
	return d, err
}

// Entries lists the entries in force for ctx's tenant, by command name.
func (l *List) Entries(ctx context.Context) []Listed {
	if l == nil {
		return nil
	}
	cur := l.current(ctx)
	out := make([]Listed, 0, len(cur))
	for _, e := range cur {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Command < out[j].Command })
	return out
}

// All lists every entry of every tenant, by tenant and command name (the
// console's view for admins).
func (l *List) All() []Listed {
	if l == nil {
		return nil
	}
	l.current(context.Background()) // reloads when stale
	l.mu.Lock()
	out := make([]Listed, 0, len(l.policy))
	for _, e := range l.policy {
		out = append(out, Listed{Entry: e})
	}
	for _, byCommand := range l.agent {
		for _, e := range byCommand {
			out = append(out, e)
		}
	}
	l.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Tenant != out[j].Tenant {
			return out[i].Tenant < out[j].Tenant
		}
		return out[i].Command < out[j].Command
	})
	return out
}

// editTenant is whose entries an edit under ctx changes: an admin's are
// every tenant's (""), anyone else's their own.
func editTenant(ctx context.Context) string {
	if t, ok := tenant.From(ctx); ok && t.Admin {
		return ""
	}
	return tenant.Owner(ctx)
}

// Block adds command (by an agent, named by by). It reports whether the entry
// is new; blocking a name the policy already blocks is an error.
func (l *List) Block(ctx context.Context, command, reason, by string) (bool, error) {
	if !l.EditsAllowed() {
		return false, ErrEditsOff
	}
	if !ValidName(command) {
		return false, fmt.Errorf("command %q %w", command, ErrBadName)
	}
	if len(reason) > maxReasonLength || hasControl(reason) {
		return false, ErrBadReason
	}
	if _, ok := l.policy[command]; ok {
		return false, fmt.Errorf("%q is already on the block list by the operator's policy", command)
	}
	isNew, err := l.st.PutBlockedCommand(ctx, record.BlockedCommand{Tenant: editTenant(ctx), Command: command, Reason: reason, AddedBy: by, AddedAt: time.Now()})
	if err != nil {
		return false, err
	}
	return isNew, l.reload(ctx)
}

// Unblock removes an entry an agent of ctx's tenant added (an admin: an
// entry for every tenant). Another tenant's entry is not seen at all.
func (l *List) Unblock(ctx context.Context, command string) error {
	if !l.EditsAllowed() {
		return ErrEditsOff
	}
	if !ValidName(command) {
		return fmt.Errorf("command %q %w", command, ErrBadName)
	}
	if _, ok := l.policy[command]; ok {
		return fmt.Errorf("%q %w", command, ErrPolicyEntry)
	}
	who := editTenant(ctx)
	ok, err := l.st.DeleteBlockedCommand(ctx, who, command)
	if err != nil {
		return err
	}
	if !ok {
		l.mu.Lock()
		_, global := l.agent[""][command]
		l.mu.Unlock()
		if global && who != "" {
			return fmt.Errorf("%q %w", command, ErrAdminEntry)
		}
		return fmt.Errorf("%q %w", command, ErrNotBlocked)
	}
	return l.reload(ctx)
}

func hasControl(s string) bool {
	for _, r := range s {
		if unicode.IsControl(r) {
			return true
		}
	}
	return false
}
