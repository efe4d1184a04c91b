package engine

import (
	"fmt"

	"github.com/hostqos/hostqos/internal/policy"
)

// The engine's refusals. Front doors map them to their own words (the
// HTTP API to status codes); policy.FieldError and policy.Errors are the
// engine's field errors (invalid input, nothing changed).

// NotFoundError is a request for an object that does not exist. Fix
// says where to look ("" : hostqos WHAT list).
type NotFoundError struct{ What, Name, Fix string }

func (e *NotFoundError) Error() string {
	fix := e.Fix
	if fix == "" {
		fix = fmt.Sprintf("see hostqos %s list", e.What)
	}
	return fmt.Sprintf("%s %q not found; %s", e.What, policy.Clip(e.Name), fix)
}

// ForbiddenError is a request by someone not allowed to make it.
type ForbiddenError struct{ Why string }

func (e *ForbiddenError) Error() string { return e.Why }

// ConflictError is an add of something that exists.
type ConflictError struct{ What, Name string }

func (e *ConflictError) Error() string {
	return fmt.Sprintf("%s %q already exists; change it with hostqos %s set %s", e.What, e.Name, e.What, e.Name)
}

// BadRequestError is a malformed request or one that cannot be done as
// asked (a process that has exited, a rule that belongs to a run).
type BadRequestError struct{ Err error }

func (e *BadRequestError) Error() string { return e.Err.Error() }
func (e *BadRequestError) Unwrap() error { return e.Err }

// TooManyError is a request refused because a limit is reached: a bound
// on what one user or the host may hold, or, when Admission, what
// admission control admits (a real-time channel set whose delay bounds
// cannot all be met).
type TooManyError struct {
	Why       string
	Admission bool
}

func (e *TooManyError) Error() string { return e.Why }
