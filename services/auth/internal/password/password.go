// Package password hashes and verifies passwords with argon2id, stores them
// as PHC strings, and bounds how many hashes run at once so that a flood of
// sign-ins cannot exhaust memory (each hash holds Params.MemoryKiB).
package password

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/crypto/argon2"
)

// Length limits, in bytes. No composition rules (NIST SP 800-63B).
const (
	MinLength = 8
	MaxLength = 1024
)

// Params are argon2id cost parameters.
type Params struct {
	MemoryKiB uint32
	Time      uint32
	Threads   uint8
	SaltLen   int
	KeyLen    int
}

// OWASP is OWASP's minimum recommendation for argon2id: 19 MiB, t=2, p=1.
var OWASP = Params{MemoryKiB: 19456, Time: 2, Threads: 1, SaltLen: 16, KeyLen: 32}

// Validate reports unusable parameters.
func (p Params) Validate() error {
	switch {
	case p.MemoryKiB < 8*uint32(p.Threads) || p.MemoryKiB == 0:
		return errors.New("argon2 memory must be at least 8 KiB per thread")
	case p.Time < 1:
		return errors.New("argon2 time must be at least 1")
	case p.Threads < 1:
		return errors.New("argon2 threads must be at least 1")
	case p.SaltLen < 8:
		return errors.New("argon2 salt must be at least 8 bytes")
	case p.KeyLen < 16:
		return errors.New("argon2 key must be at least 16 bytes")
	}
	return nil
}

// ErrMalformedHash is returned for a stored hash that is not a PHC argon2id string.
var ErrMalformedHash = errors.New("malformed password hash")

// Hasher hashes with its current Params, at most a fixed number at a time.
type Hasher struct {
	params Params
	sem    chan struct{}
	dummy  string
}

// NewHasher returns a Hasher running at most concurrency hashes at once
// (runtime.NumCPU when concurrency <= 0).
func NewHasher(p Params, concurrency int) (*Hasher, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if concurrency <= 0 {
		concurrency = runtime.NumCPU()
	}
	h := &Hasher{params: p, sem: make(chan struct{}, concurrency)}
	// A hash of a random password with the current parameters: verifying
	// against it costs what verifying a real user's hash costs.
	var pw [24]byte
	_, _ = rand.Read(pw[:])
	dummy, err := h.Hash(context.Background(), base64.RawStdEncoding.EncodeToString(pw[:]))
	if err != nil {
		return nil, err
	}
	h.dummy = dummy
	return h, nil
}

// Params returns the current parameters.
func (h *Hasher) Params() Params { return h.params }

func (h *Hasher) acquire(ctx context.Context) error {
	select {
	case h.sem <- struct{}{}:
		return nil
	default:
	}
	select {
	case h.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (h *Hasher) release() { <-h.sem }

// Hash returns the PHC string of pw with a fresh random salt.
func (h *Hasher) Hash(ctx context.Context, pw string) (string, error) {
	salt := make([]byte, h.params.SaltLen)
	if _, err := rand.Read(salt); err != nil {
		return "", err
	}
	if err := h.acquire(ctx); err != nil {
		return "", err
	}
	key := argon2.IDKey([]byte(pw), salt, h.params.Time, h.params.MemoryKiB, h.params.Threads, uint32(h.params.KeyLen))
	h.release()
	return Encode(h.params, salt, key), nil
}

// Verify reports whether pw matches the PHC string encoded, and whether the
// hash should be replaced because its parameters differ from the current ones.
func (h *Hasher) Verify(ctx context.Context, pw, encoded string) (ok, rehash bool, err error) {
	p, salt, key, err := Decode(encoded)
	if err != nil {
		return false, false, err
	}
	if err := h.acquire(ctx); err != nil {
		return false, false, err
	}
	got := argon2.IDKey([]byte(pw), salt, p.Time, p.MemoryKiB, p.Threads, uint32(len(key)))
	h.release()
	if subtle.ConstantTimeCompare(got, key) != 1 {
		return false, false, nil
	}
	return true, p != h.params, nil
}

// VerifyDummy spends the time of one Verify and always fails: used when the
// user is unknown so that timing does not reveal which e-mails exist.
func (h *Hasher) VerifyDummy(ctx context.Context, pw string) error {
	_, _, err := h.Verify(ctx, pw, h.dummy)
	return err
}

// Encode formats a PHC string: $argon2id$v=19$m=..,t=..,p=..$salt$hash.
func Encode(p Params, salt, key []byte) string {
	b64 := base64.RawStdEncoding
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s",
		argon2.Version, p.MemoryKiB, p.Time, p.Threads, b64.EncodeToString(salt), b64.EncodeToString(key))
}

// Decode parses a PHC argon2id string. SaltLen and KeyLen of the returned
// Params are those of the stored salt and key.
func Decode(s string) (Params, []byte, []byte, error) {
	var p Params
	parts := strings.Split(s, "$")
	if len(parts) != 6 || parts[0] != "" || parts[1] != "argon2id" || parts[2] != "v="+strconv.Itoa(argon2.Version) {
		return p, nil, nil, ErrMalformedHash
	}
	for _, kv := range strings.Split(parts[3], ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return p, nil, nil, ErrMalformedHash
		}
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			return p, nil, nil, ErrMalformedHash
		}
		switch k {
		case "m":
			p.MemoryKiB = uint32(n)
		case "t":
			p.Time = uint32(n)
		case "p":
			if n > 255 {
				return p, nil, nil, ErrMalformedHash
			}
			p.Threads = uint8(n)
		default:
			return p, nil, nil, ErrMalformedHash
		}
	}
	salt, err := base64.RawStdEncoding.DecodeString(parts[4])
	if err != nil {
		return p, nil, nil, ErrMalformedHash
	}
	key, err := base64.RawStdEncoding.DecodeString(parts[5])
	if err != nil {
		return p, nil, nil, ErrMalformedHash
	}
	p.SaltLen, p.KeyLen = len(salt), len(key)
	// Refuse parameters no hash of ours would have: a corrupted record must
	// not make a sign-in allocate gigabytes.
	if p.Validate() != nil || p.MemoryKiB > 4<<20 || p.Time > 64 {
		return p, nil, nil, ErrMalformedHash
	}
	return p, salt, key, nil
}
