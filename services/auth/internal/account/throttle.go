package account

import (
	"context"
	"errors"
	"strings"
	"time"
)

// throttleKey is a throttle key and the rule its attempts count under.
type throttleKey struct {
	key  string
	rule ThrottleRule
}

// admission is what one attempt was admitted with: a ticket per key.
type admission []Ticket

// admit reserves one attempt under each key (a rule with Max <= 0 is off)
// before the work the keys guard, all or none: when one key refuses
// (*ThrottledError), the attempt did not happen under any. An admitted
// attempt counts until release or succeeded gives it back, so a failure
// needs no further write, and N concurrent attempts never do the guarded
// work more than Max times.
func (s *Service) admit(ctx context.Context, keys ...throttleKey) (admission, error) {
	reqs := make([]ThrottleRequest, 0, len(keys))
	for _, k := range keys {
		if k.rule.Max > 0 {
			reqs = append(reqs, ThrottleRequest{Key: k.key, Rule: k.rule})
		}
	}
	if len(reqs) == 0 {
		return nil, nil
	}
	a, err := s.throttle.Admit(ctx, s.now(), reqs...)
	if err != nil {
		var te *ThrottledError
		if errors.As(err, &te) && te.What == "" {
			te.What = throttledWhat(te.Key)
		}
		return nil, err
	}
	return a, nil
}

// release gives back every attempt of a: it did not fail (it was not
// decided, or it succeeded and the keys count attempts only when they fail).
func (s *Service) release(ctx context.Context, a admission) {
	if len(a) == 0 {
		return
	}
	if err := s.throttle.Release(context.WithoutCancel(ctx), a...); err != nil {
		s.log.WarnContext(ctx, "release throttle tickets", "err", err)
	}
}

// succeeded ends a successful attempt: the key reset forgets its earlier
// failures (unless the attempt was its only one), the others get their
// ticket back, in one call (ThrottleStore.Succeed).
func (s *Service) succeeded(ctx context.Context, a admission, reset string) {
	var rest admission
	resetting := false
	for _, tk := range a {
		if tk.Key == reset && !tk.Fresh {
			resetting = true
			continue
		}
		rest = append(rest, tk)
	}
	if resetting {
		if err := s.throttle.Succeed(context.WithoutCancel(ctx), reset, rest...); err != nil {
			s.log.WarnContext(ctx, "end throttled attempt", "err", err)
		}
		return
	}
	s.release(ctx, rest)
}

// admitBegin admits the begin of a sign-in whose state is stored until it
// is finished or expires (a passkey ceremony, a provider flow): anyone may
// begin one, so every begin counts against the client address ip (rule
// address, under one key for every kind of begin; skipped when ip is
// empty) and takes one of the unfinished slots of pending. It returns the
// admission, to release when the begin fails, and the pending slot's
// handle (slotHandle: the slot and the store's mark of this hold on it),
// which the stored state keeps until its finish gives it back
// (releaseSlot).
// Past either limit: *ThrottledError saying what.
func (s *Service) admitBegin(ctx context.Context, ip string, address ThrottleRule, pending throttleKey, what string) (admission, string, error) {
	var keys []throttleKey
	if ip != "" {
		keys = append(keys, throttleKey{beginAddressKey(ip), address})
	}
	keys = append(keys, pending)
	adm, err := s.admit(ctx, keys...)
	if err != nil {
		var te *ThrottledError
		if errors.As(err, &te) {
			te.What = what
		}
		return nil, "", err
	}
	var slot string
	for _, tk := range adm {
		if tk.Key == pending.key && tk.Slot != "" {
			slot = slotHandle(tk)
		}
	}
	return adm, slot, nil
}

// slotHandle is how a stored sign-in state keeps its pending slot: the
// slot and the store's mark of this hold on it (Ticket.Nonce), without
// which the store gives nothing back. The mark holds no '|'.
func slotHandle(tk Ticket) string { return tk.Slot + "|" + tk.Nonce }

// releaseSlot gives back the pending slot a finished sign-in's state kept
// (admitBegin's handle); "" is none.
func (s *Service) releaseSlot(ctx context.Context, handle string) {
	if handle == "" {
		return
	}
	i := strings.LastIndexByte(handle, '|')
	if i < 0 {
		s.log.WarnContext(ctx, "a pending sign-in's slot without its mark", "slot", handle)
		return
	}
	if err := s.throttle.Release(context.WithoutCancel(ctx), Ticket{Slot: handle[:i], Nonce: handle[i+1:]}); err != nil {
		s.log.WarnContext(ctx, "release a pending sign-in's slot", "err", err)
	}
}

// beginAddressKey is the throttle key of the sign-ins begun from a client
// address: passkey ceremonies and provider flows together.
func beginAddressKey(ip string) string { return "ceremony-" + addressKey(ip) }

// throttleFail counts one attempt of each key under its rule, for actions
// where every request counts (reset links, mails); *ThrottledError when a
// key is used up or locked, and then nothing is counted.
func (s *Service) throttleFail(ctx context.Context, keys ...throttleKey) error {
	_, err := s.admit(ctx, keys...)
	return err
}

// throttleReset forgets key's attempts and lock.
func (s *Service) throttleReset(ctx context.Context, key string) error {
	return s.throttle.Reset(context.WithoutCancel(ctx), key, s.now())
}

// checkThrottle returns ThrottledError if any key is locked, else the keys
// that have throttle state. It reserves nothing: admit is what limits.
func (s *Service) checkThrottle(ctx context.Context, keys []string) (map[string]time.Time, error) {
	locks, err := s.throttle.Check(ctx, keys)
	if err != nil {
		return nil, err
	}
	t := s.now()
	var until time.Time
	for _, l := range locks {
		if l.After(until) {
			until = l
		}
	}
	if until.After(t) {
		return nil, &ThrottledError{RetryAfter: until.Sub(t)}
	}
	return locks, nil
}

// signInKeys are the throttle keys of a sign-in attempt on the account key
// acct from client address ip (may be empty).
func (s *Service) signInKeys(acct, ip string) []throttleKey {
	keys := []throttleKey{{acct, s.cfg.Account}}
	if ip != "" {
		keys = append(keys, throttleKey{addressKey(ip), s.cfg.Address})
	}
	return keys
}

// throttledWhat says what a refused key limits ("" is failed sign-ins).
func throttledWhat(key string) string {
	switch {
	case strings.HasPrefix(key, "reset-"):
		return "too many password reset requests"
	case strings.HasPrefix(key, "email-"):
		return "too many e-mail address changes or verification mails"
	case strings.HasPrefix(key, "ceremony-"):
		return "too many sign-ins begun"
	}
	return ""
}
