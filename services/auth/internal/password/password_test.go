package password

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"
)

var low = Params{MemoryKiB: 64, Time: 1, Threads: 1, SaltLen: 16, KeyLen: 32}

func newHasher(t *testing.T, p Params, n int) *Hasher {
	t.Helper()
	h, err := NewHasher(p, n)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestHashIsPHCArgon2id(t *testing.T) {
	h := newHasher(t, OWASP, 1)
	got, err := h.Hash(context.Background(), "correct horse battery")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`^\$argon2id\$v=19\$m=19456,t=2,p=1\$[A-Za-z0-9+/]{22}\$[A-Za-z0-9+/]{43}$`)
	if !re.MatchString(got) {
		t.Fatalf("hash %q is not a PHC argon2id string with OWASP parameters", got)
	}
	p, salt, key, err := Decode(got)
	if err != nil || p != OWASP || len(salt) != 16 || len(key) != 32 {
		t.Fatalf("decode: %+v salt=%d key=%d err=%v", p, len(salt), len(key), err)
	}
	other, _ := h.Hash(context.Background(), "correct horse battery")
	if other == got {
		t.Fatal("two hashes of one password are equal: salt not random")
	}
}

func TestVerify(t *testing.T) {
	h := newHasher(t, low, 2)
	ctx := context.Background()
	enc, err := h.Hash(ctx, "password-one")
	if err != nil {
		t.Fatal(err)
	}
	if ok, rehash, err := h.Verify(ctx, "password-one", enc); !ok || rehash || err != nil {
		t.Fatalf("right password: ok=%v rehash=%v err=%v", ok, rehash, err)
	}
	if ok, _, err := h.Verify(ctx, "password-two", enc); ok || err != nil {
		t.Fatalf("wrong password: ok=%v err=%v", ok, err)
	}
	if err := h.VerifyDummy(ctx, "anything-at-all"); err != nil {
		t.Fatal(err)
	}
}

func TestRehashWhenParamsChange(t *testing.T) {
	ctx := context.Background()
	old := newHasher(t, low, 1)
	enc, _ := old.Hash(ctx, "password-one")
	for _, p := range []Params{
		{MemoryKiB: 128, Time: 1, Threads: 1, SaltLen: 16, KeyLen: 32},
		{MemoryKiB: 64, Time: 2, Threads: 1, SaltLen: 16, KeyLen: 32},
		{MemoryKiB: 64, Time: 1, Threads: 2, SaltLen: 16, KeyLen: 32},
	} {
		cur := newHasher(t, p, 1)
		ok, rehash, err := cur.Verify(ctx, "password-one", enc)
		if !ok || !rehash || err != nil {
			t.Fatalf("params %+v: ok=%v rehash=%v err=%v, want ok and rehash", p, ok, rehash, err)
		}
		if ok, _, _ := cur.Verify(ctx, "password-two", enc); ok {
			t.Fatal("wrong password accepted")
		}
	}
}

func TestDecodeRejectsMalformed(t *testing.T) {
	good := Encode(low, make([]byte, 16), make([]byte, 32))
	if _, _, _, err := Decode(good); err != nil {
		t.Fatalf("good: %v", err)
	}
	for _, s := range []string{
		"",
		"plain",
		strings.Replace(good, "argon2id", "argon2i", 1),
		strings.Replace(good, "v=19", "v=16", 1),
		strings.Replace(good, "m=64", "m=x", 1),
		strings.Replace(good, "m=64", "m=99999999", 1),
		strings.Replace(good, ",p=1", ",q=1", 1),
		good + "$extra",
		good[:len(good)-3] + "!!!",
	} {
		if _, _, _, err := Decode(s); !errors.Is(err, ErrMalformedHash) {
			t.Errorf("Decode(%q) = %v, want ErrMalformedHash", s, err)
		}
	}
}

func TestHashWaitRespectsContext(t *testing.T) {
	h := newHasher(t, low, 1)
	h.sem <- struct{}{} // the only slot is busy
	defer h.release()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := h.Hash(ctx, "password-one"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Hash with no free slot = %v, want DeadlineExceeded", err)
	}
	if _, _, err := h.Verify(ctx, "password-one", h.dummy); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Verify with no free slot = %v, want DeadlineExceeded", err)
	}
}

func TestValidateParams(t *testing.T) {
	if err := OWASP.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []Params{{MemoryKiB: 0, Time: 1, Threads: 1, SaltLen: 16, KeyLen: 32}, {MemoryKiB: 64, Time: 0, Threads: 1, SaltLen: 16, KeyLen: 32}, {MemoryKiB: 64, Time: 1, Threads: 0, SaltLen: 16, KeyLen: 32}} {
		if p.Validate() == nil {
			t.Errorf("%+v accepted", p)
		}
	}
}
