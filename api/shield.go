package api

import (
	"context"
	"encoding/json"
	"net/netip"
	"time"

	"github.com/hostqos/hostqos/internal/policy"
)

// Routes of the XDP shield (drop list, protected clients); see docs/ddos.md.
const (
	RouteBlocks          = "GET /v1/blocks"
	RouteAddBlock        = "POST /v1/blocks"
	RouteRemoveBlock     = "DELETE /v1/blocks/{prefix}"
	RouteProtected       = "GET /v1/protected"
	RouteAddProtected    = "POST /v1/protected"
	RouteRemoveProtected = "DELETE /v1/protected/{client}"
)

// BlockRequest adds (or replaces) a drop-list entry.
type BlockRequest struct {
	Prefix netip.Prefix `json:"prefix"`
	// MaxBWIn quarantines instead of dropping (see policy.Block).
	MaxBWIn policy.Rate `json:"maxbw_in,omitempty"`
	// TTLSeconds removes the entry after this long (0: never); the
	// daemon keeps the deadline across restarts.
	TTLSeconds int64 `json:"ttl_s,omitempty"`
}

// UnmarshalJSON decodes a block request strictly (as the daemon decodes
// every body) and refuses maxbw_in given as 0: 0 is "no limit" for every
// rate, so it would pass everything; leaving maxbw_in out drops everything
// (see policy.ZeroBlockRateReason).
func (b *BlockRequest) UnmarshalJSON(data []byte) error {
	type plain BlockRequest
	*b = BlockRequest{}
	return policy.DecodeJSONObject(data, (*plain)(b), "block", map[string]func(json.RawMessage) error{
		"maxbw_in": func(raw json.RawMessage) error {
			if err := b.MaxBWIn.UnmarshalJSON(raw); err != nil || b.MaxBWIn != 0 || string(raw) == "null" {
				return err
			}
			fe := &policy.FieldError{Object: "block", Field: "maxbw_in", Reason: policy.ZeroBlockRateReason, Fix: policy.ZeroBlockRateFix}
			var s string
			if json.Unmarshal(raw, &s) == nil {
				fe.Value = policy.Clip(s)
			} else {
				fe.Value, fe.Literal = policy.Clip(string(raw)), true
			}
			return policy.Errors{fe}
		},
	})
}

// MaxTTLSeconds bounds a TTL (a year).
const MaxTTLSeconds = 366 * 24 * 3600

// BlockInfo is a drop-list entry with its counters: every packet from
// the prefix seen on a managed link (bytes of the whole frame, Ethernet
// header included) and those dropped (all of them without MaxBWIn).
type BlockInfo struct {
	policy.Block
	Source  string     `json:"source"` // config | api
	Expires *time.Time `json:"expires,omitempty"`
	Packets uint64     `json:"packets"`
	Bytes   uint64     `json:"bytes"`
	Dropped uint64     `json:"dropped"`
}

// ProtectRequest promotes a client: its SYNs to Port (0: any local port,
// admins only) bypass SYN throttling. Root and group hostqos may protect
// any client; another user only a single address for a TCP port on which
// a listening socket of theirs is open.
type ProtectRequest struct {
	Addr       netip.Addr `json:"addr"`
	Port       uint16     `json:"port,omitempty"`
	TTLSeconds int64      `json:"ttl_s,omitempty"`
	// Class the client's flows go into (our answers to it: its DSCP,
	// priority and HTB leaf); "" is the daemon's protected class
	// (interactive). Ordinary users may name only user_allowed classes.
	Class string `json:"class,omitempty"`
}

// ProtectedInfo is a protected client.
type ProtectedInfo struct {
	Addr    netip.Addr `json:"addr"`
	Port    uint16     `json:"port,omitempty"`
	UID     uint32     `json:"uid"` // who protected it
	Class   string     `json:"class"`
	Expires *time.Time `json:"expires,omitempty"`
}

// ProtectedKey names a protected client in a path, as netip.AddrPort
// writes it: "198.18.1.1:443", "[2001:db8::1]:0" (port 0: any port).
func ProtectedKey(a netip.Addr, port uint16) string {
	return netip.AddrPortFrom(a, port).String()
}

// ShieldAPI manages the XDP shield.
type ShieldAPI interface {
	Blocks(ctx context.Context) ([]BlockInfo, error)
	Block(ctx context.Context, req BlockRequest, opts ...ChangeOption) (BlockInfo, error)
	Unblock(ctx context.Context, prefix netip.Prefix, opts ...ChangeOption) error
	Protected(ctx context.Context) ([]ProtectedInfo, error)
	Protect(ctx context.Context, req ProtectRequest, opts ...ChangeOption) (ProtectedInfo, error)
	Unprotect(ctx context.Context, addr netip.Addr, port uint16, opts ...ChangeOption) error
}

// Shield returns the client for the XDP shield.
func (c *Client) Shield() ShieldAPI {
	return shieldClient{
		blocks:    objectClient[BlockInfo]{c, objectRoutes{list: RouteBlocks, add: RouteAddBlock, remove: RouteRemoveBlock}},
		protected: objectClient[ProtectedInfo]{c, objectRoutes{list: RouteProtected, add: RouteAddProtected, remove: RouteRemoveProtected}},
	}
}

// shieldClient is the client of the XDP shield: its drop list and its
// protected clients.
type shieldClient struct {
	blocks    objectClient[BlockInfo]
	protected objectClient[ProtectedInfo]
}

// Blocks lists the drop list with its counters.
func (s shieldClient) Blocks(ctx context.Context) ([]BlockInfo, error) { return s.blocks.List(ctx) }

// Block adds or replaces a drop-list entry.
func (s shieldClient) Block(ctx context.Context, req BlockRequest, opts ...ChangeOption) (BlockInfo, error) {
	return add[BlockInfo](ctx, s.blocks, req, opts)
}

// Unblock removes a drop-list entry added through the API.
func (s shieldClient) Unblock(ctx context.Context, prefix netip.Prefix, opts ...ChangeOption) error {
	return s.blocks.Remove(ctx, prefix.String(), opts...)
}

// Protected lists the protected clients.
func (s shieldClient) Protected(ctx context.Context) ([]ProtectedInfo, error) {
	return s.protected.List(ctx)
}

// Protect protects a client.
func (s shieldClient) Protect(ctx context.Context, req ProtectRequest, opts ...ChangeOption) (ProtectedInfo, error) {
	return add[ProtectedInfo](ctx, s.protected, req, opts)
}

// Unprotect ends a client's protection.
func (s shieldClient) Unprotect(ctx context.Context, addr netip.Addr, port uint16, opts ...ChangeOption) error {
	return s.protected.Remove(ctx, ProtectedKey(addr, port), opts...)
}
