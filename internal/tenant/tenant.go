// Package tenant carries who a request acts for. Every client known by a
// token is a tenant; stdio's client is the tenant "local". The store filters
// what a tenant owns by the tenant in a call's context (docs/architecture.md,
// "Tenancy"): a
// context without one (the server's own background work) sees everything,
// and so does an admin's.
package tenant

import "context"

// Local is the tenant of stdio clients and of loopback HTTP without tokens.
const Local = "local"

// Tenant is who a request acts for.
type Tenant struct {
	Name string
	// Admin sees every tenant's jobs and workspaces.
	Admin bool
	// ReadOnly may call only tools that change nothing.
	ReadOnly bool
	// MaxJobs and MaxWorkspaces bound its queued-or-running jobs and its
	// workspaces (0: only the policy's bounds); Toolsets, when set, are the
	// toolsets and presets it may call.
	MaxJobs, MaxWorkspaces int
	Toolsets               []string
}

type key struct{}

// With returns ctx acting for t.
func With(ctx context.Context, t Tenant) context.Context { return context.WithValue(ctx, key{}, t) }

// From returns the tenant ctx acts for.
func From(ctx context.Context) (Tenant, bool) {
	t, ok := ctx.Value(key{}).(Tenant)
	return t, ok
}

// Scope is the tenant whose rows a call may see, "" for all of them (no
// tenant in ctx, or an admin).
func Scope(ctx context.Context) string {
	t, ok := From(ctx)
	if !ok || t.Admin {
		return ""
	}
	return t.Name
}

// Owner is the tenant that a row made under ctx belongs to.
func Owner(ctx context.Context) string {
	if t, ok := From(ctx); ok && t.Name != "" {
		return t.Name
	}
	return Local
}
