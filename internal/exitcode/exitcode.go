// Package exitcode carries a process exit status out of a command's run function, for lever
// and lev alike. It owns one rule: a plain error exits 2 (the status both binaries document
// for errors), and only a status other than that needs wrapping. It does not print: main
// decides what to say.
package exitcode

import (
	"errors"
	"fmt"
)

// Failure is the status of any error that does not carry its own.
const Failure = 2

// Error is an error with the status the process should exit with. Err may be nil for an
// exit that has already said everything it had to (verify's drift report exits 1).
type Error struct {
	Code int
	Err  error
}

// New wraps err so the process exits with code.
func New(code int, err error) *Error { return &Error{Code: code, Err: err} }

func (e *Error) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit status %d", e.Code)
	}
	return e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// Of is the status for err: 0 for nil, the Code of the outermost *Error in its chain,
// otherwise Failure.
func Of(err error) int {
	if err == nil {
		return 0
	}
	var ee *Error
	if errors.As(err, &ee) {
		return ee.Code
	}
	return Failure
}

// Message is what to print for err, or "" when there is nothing to add (nil, or an *Error
// that carries no error of its own).
func Message(err error) string {
	if err == nil {
		return ""
	}
	var ee *Error
	if errors.As(err, &ee) && ee.Err == nil {
		return ""
	}
	return err.Error()
}
