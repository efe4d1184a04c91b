package api

import "github.com/hostqos/hostqos/internal/policy"

// The policy objects the API carries, named here so that programs outside
// this module (which cannot import internal packages) can build and read
// them: a rule, a class and a link, their value types, and the field errors
// of a refused change.
type (
	Rule       = policy.Rule
	Class      = policy.Class
	Link       = policy.Link
	Rate       = policy.Rate
	Size       = policy.Size
	DSCP       = policy.DSCP
	PortRange  = policy.PortRange
	Action     = policy.Action
	FieldError = policy.FieldError
)

// NoDSCP is the value of a DSCP field that is not set (DSCP 0 is a mark).
const NoDSCP = policy.NoDSCP

// NewRule returns a rule with nothing set, ready to fill in and add.
func NewRule(name string) Rule { return policy.NewRule(name) }
