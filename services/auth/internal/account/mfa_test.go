package account

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pquerna/otp"
	"github.com/pquerna/otp/hotp"
)

func TestSealOpen(t *testing.T) {
	s := &Service{now: now}
	if err := s.SetMFA(nil, nil, MFAConfig{Key: []byte(strings.Repeat("k", 32))}); err != nil {
		t.Fatal(err)
	}
	const secret = "JBSWY3DPEHPK3PXP"
	sealed := s.mfa.seal("user-1", secret)
	if strings.Contains(sealed, secret) || !strings.HasPrefix(sealed, sealedPrefix) {
		t.Fatalf("sealed form %q shows the secret", sealed)
	}
	if got, err := s.mfa.open("user-1", sealed); err != nil || got != secret {
		t.Fatalf("open: %q %v", got, err)
	}
	if _, err := s.mfa.open("user-2", sealed); err == nil {
		t.Fatal("a sealed secret opened for another user")
	}
	// Without a key, secrets are stored plain; with one, plain records
	// still open (a key set later keeps older factors working).
	plain := &Service{now: now}
	if err := plain.SetMFA(nil, nil, MFAConfig{}); err != nil {
		t.Fatal(err)
	}
	p := plain.mfa.seal("user-1", secret)
	if got, err := s.mfa.open("user-1", p); err != nil || got != secret {
		t.Fatalf("open plain with a key: %q %v", got, err)
	}
	if _, err := plain.mfa.open("user-1", sealed); err == nil {
		t.Fatal("a sealed secret opened without the key")
	}
}

func TestMatchTOTP(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s := &Service{now: func() time.Time { return at }}
	const secret = "JBSWY3DPEHPK3PXP"
	step := at.Unix() / totpPeriod
	code := func(st int64) string {
		c, err := hotp.GenerateCodeCustom(secret, uint64(st), hotp.ValidateOpts{Digits: otp.DigitsSix, Algorithm: otp.AlgorithmSHA1})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	for _, st := range []int64{step - 1, step, step + 1} {
		if got, ok := s.matchTOTP(secret, code(st)); !ok || got != st {
			t.Fatalf("step %d: %d %v", st, got, ok)
		}
	}
	for _, st := range []int64{step - 2, step + 2} {
		if c := code(st); c != code(step-1) && c != code(step) && c != code(step+1) {
			if _, ok := s.matchTOTP(secret, c); ok {
				t.Fatalf("step %d accepted at step %d", st, step)
			}
		}
	}
	for _, c := range []string{"", "12345", "1234567", "12345a"} {
		if _, ok := s.matchTOTP(secret, c); ok {
			t.Fatalf("%q accepted", c)
		}
	}
}

func TestRecoveryCodes(t *testing.T) {
	form := regexp.MustCompile(`^[a-z2-7]{5}(-[a-z2-7]{5}){4}-[a-z2-7]$`)
	seen := map[string]bool{}
	for range 100 {
		c := newRecoveryCode()
		if !form.MatchString(c) || seen[c] {
			t.Fatalf("recovery code %q", c)
		}
		seen[c] = true
		if len(normalizeRecovery(c)) != 26 {
			t.Fatalf("%q normalises to %d characters", c, len(normalizeRecovery(c)))
		}
		typed := strings.ToUpper(strings.ReplaceAll(c, "-", " "))
		if hashRecovery(typed) != hashRecovery(c) {
			t.Fatalf("%q and %q hash differently", typed, c)
		}
	}
}
