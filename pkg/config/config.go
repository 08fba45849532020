// Package config reads service settings from the environment.
//
// Each process defines its settings once, in a Table: key, kind (the
// parser), default and a one-line description. The Reader reads through
// that table only, and docs/configuration.md is generated from the same
// tables (Reference), so code, defaults and documentation cannot drift.
//
// A key is looked up with the service's prefix (AUTH_SESSION_TTL). A Shared
// setting is then also looked up without it (MONGO_URL), so values common to
// every service are set once and a single service can still override them;
// only settings that really are the same for several processes are shared
// (the tables in shared.go, and the few each service marks).
//
// A setting marked File can also come from a file: KEY_FILE names a file
// whose content (surrounding white space removed) is the value, as Docker
// and compose secrets mount them under /run/secrets. At each level the
// variable itself wins over its _FILE variant: AUTH_KEY, AUTH_KEY_FILE, KEY,
// KEY_FILE. Values read from files are masked when the configuration is
// logged, and so is the password of any URL.
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

// Reader looks the settings of a table up with a prefix and collects parse
// errors. Reading a key the table does not define, or with the method of
// another kind, panics: the table is the only place a setting is defined.
type Reader struct {
	prefix string
	getenv Getenv
	table  Table
	read   map[string]bool
	errs   []string
	seen   []entry
}

type entry struct {
	key, value string
	secret     bool
}

// New returns a Reader for the service prefix (for example "AUTH"; empty
// for a process whose settings have no prefix) over the joined tables.
func New(prefix string, getenv Getenv, tables ...Table) *Reader {
	return &Reader{prefix: strings.ToUpper(prefix), getenv: getenv, table: Join(tables...), read: map[string]bool{}}
}

// FileSuffix marks a variable that names a file holding the value.
const FileSuffix = "_FILE"

// Name is the variable a user sets for key: PREFIX_KEY (KEY without a
// prefix), for messages.
func (r *Reader) Name(key string) string {
	if r.prefix == "" {
		return key
	}
	return r.prefix + "_" + key
}

// Unread lists the table's settings no method has read: a loader that
// reads all of them returns none (its tests check it).
func (r *Reader) Unread() []string {
	var out []string
	for _, s := range r.table {
		if !r.read[s.Key] {
			out = append(out, s.Key)
		}
	}
	return out
}

func (r *Reader) setting(key string, kinds ...Kind) Setting {
	s, ok := r.table.lookup(key)
	if !ok {
		panic("config: " + key + " is not in the settings table")
	}
	for _, k := range kinds {
		if s.Kind == k {
			r.read[key] = true
			return s
		}
	}
	panic(fmt.Sprintf("config: %s is a %s setting", key, s.Kind))
}

// lookup returns the variable that supplied s, its value and whether the
// value came from a file; "" when none is set.
func (r *Reader) lookup(s Setting) (string, string, bool) {
	for _, k := range s.Names(r.prefix) {
		v := r.getenv(k)
		if v == "" {
			continue
		}
		if !s.File || !strings.HasSuffix(k, FileSuffix) {
			return k, v, false
		}
		b, err := os.ReadFile(v)
		if err != nil {
			r.errs = append(r.errs, fmt.Sprintf("%s: %v", k, err))
			return k, "", true
		}
		return k, strings.TrimSpace(string(b)), true
	}
	return "", "", false
}

// raw returns the setting's text: from the environment, else its default.
func (r *Reader) raw(s Setting) string {
	k, v, fromFile := r.lookup(s)
	if k == "" {
		v = s.Default
		k = r.Name(s.Key)
	}
	r.seen = append(r.seen, entry{k, v, s.Secret || fromFile})
	return v
}

// String returns a Text setting.
func (r *Reader) String(key string) string {
	return r.raw(r.setting(key, Text))
}

// URLWithLogin returns the URL setting key with the user name from userKey
// and the password from passwordKey placed in its user information. When
// userKey is unset the URL is returned as configured. It lets a deployment
// keep the password in a secrets file while the address stays an ordinary
// setting, for clients that take credentials in the URL (nats.go, the
// MongoDB driver). The result is logged with its password masked.
func (r *Reader) URLWithLogin(key, userKey, passwordKey string) string {
	return r.withLogin(key, userKey, passwordKey, true)
}

// MongoURL is MONGO_URL with MONGO_USER and MONGO_PASSWORD (or
// MONGO_PASSWORD_FILE) as its login, like URLWithLogin. A MongoDB
// connection string is one URL even when it lists several hosts
// (mongodb://a:27017,b:27017/?replicaSet=rs0), so it is not split at commas.
// Options such as authSource stay as configured.
func (r *Reader) MongoURL() string {
	return r.withLogin("MONGO_URL", "MONGO_USER", "MONGO_PASSWORD", false)
}

func (r *Reader) withLogin(key, userKey, passwordKey string, list bool) string {
	raw := r.String(key)
	user := r.String(userKey)
	pass := r.String(passwordKey)
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

// fail records a malformed value and returns the default's parse (which
// Table.Check guarantees).
func (r *Reader) fail(s Setting, msg string) {
	r.errs = append(r.errs, r.Name(s.Key)+": "+msg)
}

// Int parses an Int setting.
func (r *Reader) Int(key string) int {
	s := r.setting(key, Int)
	v := strings.TrimSpace(r.raw(s))
	n, err := strconv.Atoi(v)
	if err != nil {
		r.fail(s, fmt.Sprintf("%q is not an integer", v))
		n, _ = strconv.Atoi(s.Default)
	}
	return n
}

// Int64 parses a Size setting; it accepts the suffixes KiB, MiB, GiB.
func (r *Reader) Int64(key string) int64 {
	s := r.setting(key, Size)
	n, err := ParseSize(r.raw(s))
	if err != nil {
		r.fail(s, err.Error())
		n, _ = ParseSize(s.Default)
	}
	return n
}

// Duration parses a Duration setting ("15m", "720h").
func (r *Reader) Duration(key string) time.Duration {
	s := r.setting(key, Duration)
	v := strings.TrimSpace(r.raw(s))
	d, err := time.ParseDuration(v)
	if err != nil {
		r.fail(s, fmt.Sprintf("%q is not a duration", v))
		d, _ = time.ParseDuration(s.Default)
	}
	return d
}

// Bool parses a Bool setting (true/false/1/0).
func (r *Reader) Bool(key string) bool {
	s := r.setting(key, Bool)
	v := strings.TrimSpace(r.raw(s))
	b, err := strconv.ParseBool(v)
	if err != nil {
		r.fail(s, fmt.Sprintf("%q is not a boolean", v))
		b, _ = strconv.ParseBool(s.Default)
	}
	return b
}

// List splits a List setting at commas, dropping empty items.
func (r *Reader) List(key string) []string {
	var out []string
	for _, s := range strings.Split(r.raw(r.setting(key, List)), ",") {
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
