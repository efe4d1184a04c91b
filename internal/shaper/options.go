package shaper

import "log/slog"

// Option configures a call of Apply or Remove.
type Option func(*options)

type options struct {
	log *slog.Logger
}

// WithLogger makes the call log to l (with "component" = "shaper") instead
// of slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(o *options) { o.log = l }
}

func newOptions(opts []Option) options {
	var o options
	for _, f := range opts {
		f(&o)
	}
	if o.log == nil {
		// Looked up per call, so that a handler installed later with
		// slog.SetDefault is honoured.
		o.log = slog.Default()
	}
	o.log = o.log.With("component", "shaper")
	return o
}
