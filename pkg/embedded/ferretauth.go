package embedded

import (
	"context"
	"net/url"
	"os/exec"
	"slices"
)

// FerretDBAuthSource is the database that holds the setup user of an
// authenticating FerretDB (FerretDBAuth): the authSource of its
// connection strings.
const FerretDBAuthSource = "admin"

// FerretDBAuth turns on authentication for StartFerretDB: the server
// refuses every command but the handshake's (hello, saslStart, ping, ...)
// on a connection that has not logged in with SCRAM-SHA-256 as a user it
// knows. `make run` runs FerretDB so.
//
// The server program is then FerretDB's own (FerretDBServerBinary, built
// from the same patched copy as pkg/cmd/ferretdb) with its experimental
// authentication (--test-enable-new-auth): the embedding API that
// pkg/cmd/ferretdb uses has no setting for it. On its first start with
// an empty data directory (no database FerretDBAuthSource yet) FerretDB
// creates User with Password in FerretDBAuthSource; later starts keep the
// stored user, whatever Password says. FerretDB stores users but enforces
// no roles: a user that has logged in may read and write every database.
type FerretDBAuth struct {
	User     string
	Password string
}

// prepare returns the server program StartFerretDB runs for o, and adds
// the setup password to o.Env with Auth: the environment is readable only
// by this user's processes, a command line by every local user.
func (o *FerretDBOptions) prepare(ctx context.Context) (string, error) {
	if o.Auth == nil {
		return FerretDBBinary(ctx, o.Log)
	}
	o.Env = append(slices.Clip(o.Env), "FERRETDB_SETUP_PASSWORD="+o.Auth.Password)
	return FerretDBServerBinary(ctx, o.Log)
}

// uri is the connection string of the server of o (logged in as the setup
// user with Auth).
func (o FerretDBOptions) uri() string {
	if o.Auth == nil {
		return "mongodb://" + o.Addr + "/"
	}
	u := url.URL{Scheme: "mongodb", Host: o.Addr, Path: "/", User: url.UserPassword(o.Auth.User, o.Auth.Password),
		RawQuery: url.Values{"authSource": {FerretDBAuthSource}}.Encode()}
	return u.String()
}

// command is the server's command line for o, with bin the program.
func (o FerretDBOptions) command(bin string) *exec.Cmd {
	if o.Auth == nil {
		args := []string{"-listen", o.Addr, "-dir", o.Dir}
		if o.Synchronous != "" {
			args = append(args, "-synchronous", o.Synchronous)
		}
		return exec.Command(bin, args...)
	}
	sync := o.Synchronous
	if sync == "" {
		sync = "normal" // pkg/cmd/ferretdb's default
	}
	return exec.Command(bin,
		"--handler=sqlite",
		"--sqlite-url=file:"+o.Dir+"/?_pragma=synchronous("+sync+")",
		"--state-dir="+o.Dir,
		"--listen-addr="+o.Addr,
		"--debug-addr=-",
		"--telemetry=disable",
		"--log-level=error",
		"--log-format=text",
		"--test-enable-new-auth",
		"--setup-database="+FerretDBAuthSource,
		"--setup-username="+o.Auth.User,
	)
}
