package api

import (
	"context"
)

// The typed clients of the API's named objects (links, classes, rules,
// reservations, drop-list entries, protected clients) share one client,
// objectClient; a kind's client adds only the changes whose answers differ.

// objectRoutes are the routes of one kind of named object ("" where the
// kind has none).
type objectRoutes struct {
	list, show, add, put, patch, remove string
}

// callFor sends a request to route (its wildcards filled by params) and
// returns the answer decoded as A.
func callFor[A any](ctx context.Context, c *Client, route string, params []string, body any, opts []ChangeOption) (A, error) {
	var out A
	err := c.call(ctx, route, params, body, &out, opts)
	return out, err
}

// objectClient is the client of one kind of named object, listed as Info.
type objectClient[Info any] struct {
	c      *Client
	routes objectRoutes
}

// List returns the objects the caller may see.
func (o objectClient[Info]) List(ctx context.Context) ([]Info, error) {
	return callFor[[]Info](ctx, o.c, o.routes.list, nil, nil, nil)
}

// Get returns one object, as List shows it.
func (o objectClient[Info]) Get(ctx context.Context, name string) (Info, error) {
	return callFor[Info](ctx, o.c, o.routes.show, []string{name}, nil, nil)
}

// Remove removes one object.
func (o objectClient[Info]) Remove(ctx context.Context, name string, opts ...ChangeOption) error {
	return o.c.call(ctx, o.routes.remove, []string{name}, nil, nil, opts)
}

// add sends an add and returns its answer as A.
func add[A, Info any](ctx context.Context, o objectClient[Info], body any, opts []ChangeOption) (A, error) {
	return callFor[A](ctx, o.c, o.routes.add, nil, body, opts)
}

// patch sends a change of the fields given of object name (nil clears a
// field) and returns its answer as A.
func patch[A, Info any](ctx context.Context, o objectClient[Info], name string, f Fields, opts []ChangeOption) (A, error) {
	return callFor[A](ctx, o.c, o.routes.patch, []string{name}, f, opts)
}

// policyClient is the client of classes and rules (T, listed as Info):
// their changes answer nothing the caller needs.
type policyClient[T, Info any] struct{ objectClient[Info] }

// Add adds an object given whole.
func (p policyClient[T, Info]) Add(ctx context.Context, obj T, opts ...ChangeOption) error {
	return p.c.call(ctx, p.routes.add, nil, obj, nil, opts)
}

// AddFields adds object name with the fields given; the daemon fills in
// the others' defaults.
func (p policyClient[T, Info]) AddFields(ctx context.Context, name string, f Fields, opts ...ChangeOption) error {
	return p.c.call(ctx, p.routes.add, nil, withName(name, f), nil, opts)
}

// Set changes the fields given of object name (nil clears a field).
func (p policyClient[T, Info]) Set(ctx context.Context, name string, f Fields, opts ...ChangeOption) error {
	return p.c.call(ctx, p.routes.patch, []string{name}, f, nil, opts)
}
