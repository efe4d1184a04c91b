package main

import (
	"errors"
	"fmt"
	"os/exec"

	"github.com/hostqos/hostqos/api"
	"github.com/hostqos/hostqos/internal/policy"
)

// exitCode is the CLI's exit status.
type exitCode int

// The CLI's exit codes, the same for every command (docs/cli.md,
// "Exit codes"); `hostqos run`, `demo` and `bench` exit with their
// program's code instead when it fails.
const (
	exitOK        exitCode = 0
	exitFailure   exitCode = 1 // an error none of the others names
	exitUsage     exitCode = 2 // the command line is wrong; nothing was sent
	exitAdmission exitCode = 3 // refused by admission control; nothing changed
	exitInvalid   exitCode = 4 // refused as invalid, or conflicting with what exists; nothing changed
	exitForbidden exitCode = 5 // needs root or group hostqos
	exitNotFound  exitCode = 6 // no such object
	exitLimit     exitCode = 7 // a limit is reached, or the daemon is busy
	exitNoDaemon  exitCode = 8 // hostqosd is not running
	exitUnknown   exitCode = 9 // a change the daemon did not answer: its outcome is unknown
)

// exitCodes describes every exit code, for docs/cli.md (its table is
// checked against this one).
var exitCodes = []struct {
	code       exitCode
	name, when string
}{
	{exitOK, "ok", "done"},
	{exitFailure, "error", "an error none of the codes below names: the daemon failed, a file could not be written, a tool's run failed"},
	{exitUsage, "usage", "the command line is wrong: an unknown command or flag, a bad flag value or argument, a required flag missing; nothing was sent"},
	{exitAdmission, "refused by admission", "admission control refused the change: guarantees (minbw, reservations, per-session guarantees, real-time channels) that do not fit, or a change that takes away the shaping they rely on (--force applies it); nothing changed"},
	{exitInvalid, "invalid", "the daemon, or config check, refused the request or the policy as invalid, or it conflicts with what exists (an add of an object that exists); nothing changed"},
	{exitForbidden, "not permitted", "changing policy needs root or the group hostqos (or the class is not user_allowed)"},
	{exitNotFound, "not found", "no such rule, class, link, reservation, session or other object"},
	{exitLimit, "limit", "a bound on what one user or the host may hold is reached, or the daemon is busy; try again later"},
	{exitNoDaemon, "no daemon", "hostqosd is not running (nothing listens on the socket)"},
	{exitUnknown, "outcome unknown", "the daemon did not answer a change: re-run it with the --idempotency-key the message names to learn whether it was applied"},
}

// exitWith reports err on the error stream (unless it only carries an
// exit code) and returns the exit code for it.
func exitWith(io ioStreams, err error) exitCode {
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	var xe *exec.ExitError
	if errors.As(err, &xe) {
		return exitCode(xe.ExitCode())
	}
	fmt.Fprintln(io.Err, "hostqos:", err)
	return codeOf(err)
}

// codeOf is the exit code of an error: its class as the daemon gave it, or
// what the CLI found itself.
func codeOf(err error) exitCode {
	var ue *usageError
	var oe *api.OutcomeUnknownError
	var ae *api.Error
	var adm *policy.AdmissionError
	switch {
	case errors.As(err, &ue):
		return exitUsage
	case errors.As(err, &oe):
		return exitUnknown
	case errors.Is(err, api.ErrDaemonDown):
		return exitNoDaemon
	case errors.As(err, &ae):
		switch ae.Class() {
		case api.ErrAdmission:
			return exitAdmission
		case api.ErrInvalid:
			return exitInvalid
		case api.ErrForbidden:
			return exitForbidden
		case api.ErrNotFound:
			return exitNotFound
		case api.ErrLimit:
			return exitLimit
		}
		return exitFailure
	case errors.As(err, &adm):
		return exitAdmission
	case policy.AsErrors(err) != nil:
		return exitInvalid // config check
	}
	return exitFailure
}

// exitError ends the CLI with a given code and no extra message.
type exitError struct{ code exitCode }

func (e *exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// usageError is a command line the CLI refused before sending anything:
// an unknown command or flag, a bad flag value or argument. It exits with
// exitUsage.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// usagef makes a usageError as fmt.Errorf makes an error.
func usagef(format string, a ...any) error { return &usageError{fmt.Errorf(format, a...)} }
