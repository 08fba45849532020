package embedded

import (
	"fmt"
	"os"
	"regexp"
	"sort"

	"github.com/nats-io/nats-server/v2/server"
)

// NATSUsersOptions configure NATSWithUsers.
type NATSUsersOptions struct {
	// Config is the path of a nats-server configuration file whose
	// authorization block names the users and their permissions
	// (deploy/nats.conf). Its listener, monitoring and store_dir settings
	// are replaced by the ones below.
	Config string
	// Passwords are the users' passwords by user name. Every user of the
	// file must have one; the file's $VARIABLE references in place of
	// passwords are not resolved from the environment.
	Passwords map[string]string
	Dir       string // JetStream store directory
	Host      string // listening host, e.g. 127.0.0.1
	Port      int    // 0 picks a free port
}

// natsVariable matches a setting whose value is a $NAME reference, which
// nats-server would resolve from its environment (password: $NATS_..._PASSWORD).
var natsVariable = regexp.MustCompile(`(?m)^(\s*[A-Za-z_]+\s*[:=]\s*)\$[A-Za-z_][A-Za-z0-9_]*[ \t]*$`)

// NATSWithUsers starts an embedded NATS server with JetStream storing
// under o.Dir and the users and permissions of o.Config, each user's
// password taken from o.Passwords: a client must log in as one of them and
// may publish and subscribe only what its user may. `make run` runs NATS
// so, with deploy/nats.conf, the file the compose deployment's NATS reads.
// Monitoring is off.
func NATSWithUsers(o NATSUsersOptions) (*server.Server, error) {
	b, err := os.ReadFile(o.Config)
	if err != nil {
		return nil, fmt.Errorf("nats: %w", err)
	}
	// The passwords are set below, never written into the configuration
	// text (they could hold characters the parser reads otherwise).
	text := natsVariable.ReplaceAllString(string(b), `${1}"unset"`)
	opts := &server.Options{}
	if err := opts.ProcessConfigString(text); err != nil {
		return nil, fmt.Errorf("nats: %s: %w", o.Config, err)
	}
	if len(opts.Users) == 0 {
		return nil, fmt.Errorf("nats: %s names no users", o.Config)
	}
	var missing []string
	for _, u := range opts.Users {
		pw := o.Passwords[u.Username]
		if pw == "" {
			missing = append(missing, u.Username)
			continue
		}
		u.Password = pw
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return nil, fmt.Errorf("nats: no password for the user(s) %v of %s", missing, o.Config)
	}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, err
	}
	port := o.Port
	if port == 0 {
		port = server.RANDOM_PORT
	}
	// The server name of NATS, the embedded server without users, so a
	// JetStream store made by one is read by the other.
	opts.ServerName = "acme-embedded"
	opts.Host, opts.Port = o.Host, port
	opts.HTTPHost, opts.HTTPPort, opts.HTTPSPort = "", 0, 0
	opts.StoreDir = o.Dir
	opts.JetStream = true
	opts.NoSigs, opts.NoLog = true, true
	return startNATS(opts)
}
