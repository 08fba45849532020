// Package config reads service settings from the environment.
//
// Every setting has a default in code. A key is looked up first with the
// service's prefix (AUTH_ADDR) and then without it (ADDR is never used for
// addresses, but MONGO_URL is shared by all services), so values common to
// every service are set once and a single service can still override them.
//
// Any shared setting can also come from a file: KEY_FILE names a file whose
// content (surrounding white space removed) is the value, as Docker and
// compose secrets mount them under /run/secrets. At each level the variable
// itself wins over its _FILE variant: AUTH_KEY, AUTH_KEY_FILE, KEY, KEY_FILE.
// Values read from files are masked when the configuration is logged, and so
// is the password of any URL.
package config

import (
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// Getenv is the signature of os.Getenv; run functions receive it so tests can
// pass their own environment.
type Getenv func(string) string

// Reader looks keys up with a prefix and collects parse errors.
type Reader struct {
	prefix string
	getenv Getenv
	errs   []string
	seen   []entry
}

type entry struct {
	key, value string
	secret     bool
}

// New returns a Reader for the service prefix (for example "AUTH").
func New(prefix string, getenv Getenv) *Reader {
	return &Reader{prefix: strings.ToUpper(prefix), getenv: getenv}
}

// FileSuffix marks a variable that names a file holding the value.
const FileSuffix = "_FILE"

// lookup returns the variable that supplied key, its value and whether the
// value came from a file. withFiles enables the KEY_FILE variants.
func (r *Reader) lookup(key string, shared, withFiles bool) (string, string, bool) {
	var names []string
	if r.prefix != "" {
		names = append(names, r.prefix+"_"+key)
	}
	if shared {
		names = append(names, key)
	}
	for _, k := range names {
		if v := r.getenv(k); v != "" {
			return k, v, false
		}
		if !withFiles {
			continue
		}
		if path := r.getenv(k + FileSuffix); path != "" {
			b, err := os.ReadFile(path)
			if err != nil {
				r.errs = append(r.errs, fmt.Sprintf("%s: %v", k+FileSuffix, err))
				return k + FileSuffix, "", true
			}
			return k + FileSuffix, strings.TrimSpace(string(b)), true
		}
	}
	return "", "", false
}

// String returns PREFIX_KEY, else KEY, else def (each also from a _FILE).
func (r *Reader) String(key, def string) string {
	return r.str(key, def, true, false)
}

// Own returns PREFIX_KEY or def; the unprefixed KEY is not consulted. Use it
// for settings that must differ between services, such as listen addresses.
func (r *Reader) Own(key, def string) string {
	return r.str(key, def, false, false)
}

// Secret is String for values that must never be printed. Deployments
// should pass secrets as files (KEY_FILE=/run/secrets/...) rather than in
// the environment.
func (r *Reader) Secret(key, def string) string {
	return r.str(key, def, true, true)
}

func (r *Reader) str(key, def string, shared, secret bool) string {
	// Own settings (listen addresses) are never secrets: no _FILE variant.
	k, v, fromFile := r.lookup(key, shared, shared)
	if k == "" {
		v = def
		k = r.prefix + "_" + key
	}
	r.seen = append(r.seen, entry{k, v, secret || fromFile})
	return v
}

// URLWithLogin returns the URL setting key (looked up like String) with the
// user name from userKey and the password from passwordKey (a Secret, so
// passwordKey_FILE works) placed in its user information. When userKey is
// unset the URL is returned as configured. It lets a deployment keep the
// password in a secrets file while the address stays an ordinary setting,
// for clients that take credentials in the URL (nats.go, the MongoDB
// driver). The result is logged with its password masked.
func (r *Reader) URLWithLogin(key, def, userKey, passwordKey string) string {
	return r.withLogin(key, def, userKey, passwordKey, true)
}

// MongoURL is MONGO_URL (default def) with MONGO_USER and MONGO_PASSWORD
// (or MONGO_PASSWORD_FILE) as its login, like URLWithLogin. A MongoDB
// connection string is one URL even when it lists several hosts
// (mongodb://a:27017,b:27017/?replicaSet=rs0), so it is not split at commas.
// Options such as authSource stay as configured.
func (r *Reader) MongoURL(def string) string {
	return r.withLogin("MONGO_URL", def, "MONGO_USER", "MONGO_PASSWORD", false)
}

func (r *Reader) withLogin(key, def, userKey, passwordKey string, list bool) string {
	raw := r.String(key, def)
	user := r.String(userKey, "")
	pass := r.Secret(passwordKey, "")
	if user == "" {
		if pass != "" {
			r.errs = append(r.errs, fmt.Sprintf("%s is set but %s is not", passwordKey, userKey))
		}
		return raw
	}
	parts := []string{raw}
	if list { // nats.go takes a comma-separated list of servers: log in to each.
		parts = strings.Split(raw, ",")
	}
	for i, p := range parts {
		u, err := url.Parse(strings.TrimSpace(p))
		if err != nil || u.Host == "" {
			r.errs = append(r.errs, fmt.Sprintf("%s: %q is not a URL with a host", key, Redact(p)))
			return raw
		}
		if pass == "" {
			u.User = url.User(user)
		} else {
			u.User = url.UserPassword(user, pass)
		}
		parts[i] = u.String()
	}
	return strings.Join(parts, ",")
}

// Int parses an integer setting.
func (r *Reader) Int(key string, def int) int {
	v := r.String(key, strconv.Itoa(def))
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil {
		r.errs = append(r.errs, fmt.Sprintf("%s: %q is not an integer", key, v))
		return def
	}
	return n
}

// Int64 parses a 64-bit integer setting; it accepts size suffixes KiB, MiB, GiB.
func (r *Reader) Int64(key string, def int64) int64 {
	v := r.String(key, strconv.FormatInt(def, 10))
	n, err := ParseSize(v)
	if err != nil {
		r.errs = append(r.errs, fmt.Sprintf("%s: %v", key, err))
		return def
	}
	return n
}

// Duration parses a Go duration ("15m", "720h").
func (r *Reader) Duration(key string, def time.Duration) time.Duration {
	v := r.String(key, def.String())
	d, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil {
		r.errs = append(r.errs, fmt.Sprintf("%s: %q is not a duration", key, v))
		return def
	}
	return d
}

// Bool parses true/false/1/0.
func (r *Reader) Bool(key string, def bool) bool {
	v := r.String(key, strconv.FormatBool(def))
	b, err := strconv.ParseBool(strings.TrimSpace(v))
	if err != nil {
		r.errs = append(r.errs, fmt.Sprintf("%s: %q is not a boolean", key, v))
		return def
	}
	return b
}

// List splits a comma-separated setting, dropping empty items.
func (r *Reader) List(key, def string) []string {
	var out []string
	for _, s := range strings.Split(r.String(key, def), ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// Err reports every malformed setting at once.
func (r *Reader) Err() error {
	if len(r.errs) == 0 {
		return nil
	}
	return fmt.Errorf("configuration: %s", strings.Join(r.errs, "; "))
}

// Log writes the effective configuration, secrets masked.
func (r *Reader) Log(l *slog.Logger) {
	attrs := make([]any, 0, len(r.seen))
	for _, e := range r.seen {
		v := e.value
		if e.secret && v != "" {
			v = "***"
		} else {
			v = Redact(v)
		}
		attrs = append(attrs, slog.String(e.key, v))
	}
	l.Info("configuration", attrs...)
}

// Redact masks the password of a URL ("nats://auth:xxxxx@nats:4222"); any
// other string is returned unchanged. Use it before logging a URL that may
// carry credentials.
func Redact(s string) string {
	if !strings.Contains(s, "@") || !strings.Contains(s, "://") {
		return s
	}
	parts := strings.Split(s, ",")
	for i, p := range parts {
		u, err := url.Parse(strings.TrimSpace(p))
		if err != nil {
			// Unparsable but may still hold credentials: keep the scheme only.
			scheme, _, _ := strings.Cut(p, "://")
			parts[i] = scheme + "://***"
			continue
		}
		parts[i] = u.Redacted()
	}
	return strings.Join(parts, ",")
}

// ParseSize parses "1048576", "512KiB", "64MiB", "1GiB".
func ParseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	mult := int64(1)
	for suffix, m := range map[string]int64{"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30} {
		if strings.HasSuffix(s, suffix) {
			mult = m
			s = strings.TrimSuffix(s, suffix)
			break
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not a size", s)
	}
	return n * mult, nil
}
