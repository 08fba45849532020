package embedded

import (
	"context"
	"log/slog"
)

// lazyHandler defers slog.Handler.WithAttrs and WithGroup until a record is
// actually handled. FerretDB calls Logger.With on every SQL statement with
// the statement's arguments (whole documents); a plain TextHandler formats
// them eagerly even when the level is disabled, which cost about an eighth
// of FerretDB's CPU time on inserts.
type lazyHandler struct {
	base  slog.Handler
	level slog.Level
	ops   []func(slog.Handler) slog.Handler
}

func newLazyHandler(base slog.Handler, level slog.Level) *lazyHandler {
	return &lazyHandler{base: base, level: level}
}

func (h *lazyHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }

func (h *lazyHandler) Handle(ctx context.Context, r slog.Record) error {
	b := h.base
	for _, op := range h.ops {
		b = op(b)
	}
	return b.Handle(ctx, r)
}

func (h *lazyHandler) with(op func(slog.Handler) slog.Handler) slog.Handler {
	ops := make([]func(slog.Handler) slog.Handler, len(h.ops), len(h.ops)+1)
	copy(ops, h.ops)
	return &lazyHandler{base: h.base, level: h.level, ops: append(ops, op)}
}

func (h *lazyHandler) WithAttrs(as []slog.Attr) slog.Handler {
	if len(as) == 0 {
		return h
	}
	return h.with(func(b slog.Handler) slog.Handler { return b.WithAttrs(as) })
}

func (h *lazyHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	return h.with(func(b slog.Handler) slog.Handler { return b.WithGroup(name) })
}
