package proxy

import (
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/acme/platform/pkg/handoff"
)

// takeHandoff fetches the object a files answer hands off (package
// handoff) and makes it the answer's body. A fetch that fails before its
// first byte (object store unreachable from here, object missing) sends the
// request to the files service again without the offer: it streams the
// bytes itself or answers why not. Handoff headers never pass on.
func (h *Handler) takeHandoff(resp *http.Response, t *target) error {
	a, ok, err := handoff.Parse(resp.Header)
	if !ok {
		handoff.Strip(resp.Header)
		if t.preKey != "" {
			h.pre.forget(t.preKey) // refused, missing, not modified: nothing to prefetch
		}
		return nil
	}
	handoff.Strip(resp.Header)
	ctx := resp.Request.Context()
	if err == nil && h.cfg.Handoff != nil && t.service == "files" {
		if t.preKey != "" && a.End < 0 {
			h.pre.put(t.preKey, a, time.Now())
		}
		var body io.ReadCloser
		if t.pre != nil && t.pre.matches(a) {
			body, err = t.pre.take()
		}
		if body == nil {
			body, err = h.cfg.Handoff.Open(ctx, a)
		}
		if err == nil {
			resp.Body.Close()
			resp.Body = body
			resp.ContentLength = a.Length
			resp.Header.Set("Content-Length", strconv.FormatInt(a.Length, 10))
			return nil
		}
	} else if err == nil {
		err = errors.New("handoff not offered")
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	h.cfg.Log.WarnContext(ctx, "handoff: object not fetched, asking the files service for the bytes", "err", err)
	again := resp.Request.Clone(ctx)
	again.Header.Del(handoff.Offer)
	again.Body = nil
	fallback, err := t.group.RoundTrip(again)
	if err != nil {
		return err
	}
	resp.Body.Close()
	*resp = *fallback
	handoff.Strip(resp.Header)
	return nil
}
