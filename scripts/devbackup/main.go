// Command devbackup is `make backup` and `make restore`: acme-backup
// (services/backup) run against the platform `make run` is running on the
// same DATA_DIR, with the addresses it keeps in DATA_DIR/devstack.json and
// the logins of DATA_DIR/dev-secrets.json.
//
//	go run ./scripts/devbackup backup DIR   # make backup TO=DIR
//	go run ./scripts/devbackup restore DIR  # make restore FROM=DIR [DEV_SECRETS=1] [REPLACE=1]
//
// A backup of `make run` keeps its dev-secrets.json too. A restore replaces
// the accounts `make run` made at its first start with the backup's, then
// has `make run` start its services again (SIGUSR1 stops them for the
// restore, SIGHUP starts them), so none writes meanwhile or keeps what it
// had cached; with DEV_SECRETS=1 it first takes the secrets bound to the data
// (auth's AUTH_MFA_KEY, which sealed the TOTP secrets, and the first
// administrator's login) from the backup into DATA_DIR/dev-secrets.json.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/acme/platform/scripts/devstack/devenv"
	"github.com/acme/platform/scripts/stack"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "devbackup:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	if len(args) != 2 || (args[0] != "backup" && args[0] != "restore") {
		return errors.New("usage: devbackup backup DIR | restore DIR (DATA_DIR, DEV_SECRETS=1, REPLACE=1 from the environment)")
	}
	cmd, where := args[0], args[1]
	dataDir := getenv("DATA_DIR")
	if dataDir == "" {
		dataDir = "data"
	}
	root, err := stack.Root()
	if err != nil {
		return err
	}
	if !filepath.IsAbs(dataDir) {
		// make runs in the repository root, as `make run` does.
		dataDir = filepath.Join(root, dataDir)
	}
	if !strings.Contains(where, "://") && !filepath.IsAbs(where) {
		if wd, err := os.Getwd(); err == nil {
			where = filepath.Join(wd, where)
		}
	}
	st, err := devenv.ReadState(dataDir)
	if err != nil {
		return err
	}
	if syscall.Kill(st.PID, 0) != nil {
		return fmt.Errorf("`make run` (pid %d in %s) is not running", st.PID, devenv.StatePath(dataDir))
	}
	secretsFile := filepath.Join(dataDir, "dev-secrets.json")
	sec, err := devenv.ReadSecrets(secretsFile)
	if err != nil {
		return err
	}
	tool := Tool{Root: root, Bin: getenv("ACME_BACKUP_BIN"), Out: stdout, Getenv: getenv}
	env := PlatformEnv(st, sec)
	switch cmd {
	case "backup":
		return tool.Run(ctx, env, nil, "backup", "--dev-secrets", secretsFile, where)
	}

	// restore
	if getenv("DEV_SECRETS") == "1" {
		var buf bytes.Buffer
		if err := tool.Run(ctx, env, &buf, "dev-secrets", where); err != nil {
			return err
		}
		var kept devenv.Secrets
		if err := json.Unmarshal(buf.Bytes(), &kept); err != nil {
			return fmt.Errorf("the backup's dev-secrets.json: %w", err)
		}
		if kept.MFAKey == "" {
			return errors.New("the backup's dev-secrets.json holds no mfaKey")
		}
		sec.MFAKey, sec.AdminEmail, sec.AdminPassword = kept.MFAKey, kept.AdminEmail, kept.AdminPassword
		env = PlatformEnv(st, sec)
	}
	args = []string{"restore"}
	if getenv("REPLACE") == "1" {
		args = append(args, "--replace")
	}
	// No service may read or write while the data is replaced: make run
	// stops them until SIGHUP, which starts them again whatever happened.
	if err := hold(ctx, dataDir, st.PID); err != nil {
		return err
	}
	if err := tool.Run(ctx, env, nil, append(args, where)...); err != nil {
		if herr := syscall.Kill(st.PID, syscall.SIGHUP); herr == nil {
			WaitRestarted(ctx, st.GatewayURL, 2*time.Minute)
		}
		return err
	}
	if getenv("DEV_SECRETS") == "1" {
		// Only once the restore succeeded: a refused one leaves the
		// platform and its secrets as they were.
		if err := devenv.WriteSecrets(secretsFile, sec); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "took auth's AUTH_MFA_KEY and the administrator's login (%s) from the backup into %s\n", sec.AdminEmail, secretsFile)
	}
	fmt.Fprintln(stdout, "restarting the services of make run...")
	if err := syscall.Kill(st.PID, syscall.SIGHUP); err != nil {
		return err
	}
	if err := WaitRestarted(ctx, st.GatewayURL, 2*time.Minute); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "the platform serves the restored data:", st.GatewayURL)
	return nil
}

// hold asks make run (pid) to stop its services and waits until it has.
func hold(ctx context.Context, dataDir string, pid int) error {
	if err := syscall.Kill(pid, syscall.SIGUSR1); err != nil {
		return err
	}
	for deadline := time.Now().Add(90 * time.Second); ; {
		if st, err := devenv.ReadState(dataDir); err == nil && st.Held {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			syscall.Kill(pid, syscall.SIGHUP)
			return errors.New("make run did not stop its services for the restore within 90 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// PlatformEnv is acme-backup's environment for the `make run` of st.
func PlatformEnv(st devenv.State, sec devenv.Secrets) []string {
	return []string{
		"MONGO_URL=" + st.MongoURL, "MONGO_DB=" + st.MongoDB, "MONGO_USER=" + sec.MongoUser, "MONGO_PASSWORD=" + sec.MongoPassword,
		"S3_ENDPOINT=" + st.S3Endpoint, "S3_BUCKET=" + st.S3Bucket, "S3_ACCESS_KEY=" + sec.MinIOAccess, "S3_SECRET_KEY=" + sec.MinIOSecret,
		"AUTH_MFA_KEY=" + sec.MFAKey,
		// make run's NATS needs a login; its runs are one-off, not logged
		// to the log store (only `schedule` logs there).
	}
}

// Tool runs acme-backup: the binary Bin, or `go run ./services/backup`.
type Tool struct {
	Root, Bin string
	Out       io.Writer
	Getenv    func(string) string
}

// Run runs acme-backup with args and env added to the caller's BACKUP_*
// settings (age keys, a backup bucket's login); its output goes to out (nil:
// t.Out).
func (t Tool) Run(ctx context.Context, env []string, out io.Writer, args ...string) error {
	var c *exec.Cmd
	if t.Bin != "" {
		c = exec.CommandContext(ctx, t.Bin, args...)
	} else {
		c = exec.CommandContext(ctx, "go", append([]string{"run", "./services/backup"}, args...)...)
	}
	c.Dir = t.Root
	c.Env = []string{"PATH=" + t.Getenv("PATH"), "HOME=" + t.Getenv("HOME")}
	for _, k := range []string{"GOFLAGS", "GOCACHE", "GOMODCACHE", "GOPATH", "GOPROXY", "GOTOOLCHAIN"} {
		if v := t.Getenv(k); v != "" {
			c.Env = append(c.Env, k+"="+v)
		}
	}
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "BACKUP_") {
			c.Env = append(c.Env, kv)
		}
	}
	c.Env = append(c.Env, env...)
	if out == nil {
		out = t.Out
	}
	c.Stdout, c.Stderr = out, os.Stderr
	return c.Run()
}

// WaitRestarted waits for the gateway to go away (SIGHUP stopped it) and
// answer /readyz again.
func WaitRestarted(ctx context.Context, gateway string, within time.Duration) error {
	client := &http.Client{Timeout: 2 * time.Second}
	ready := func() bool {
		resp, err := client.Get(gateway + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}
	deadline := time.Now().Add(within)
	for gone := time.Now().Add(10 * time.Second); ready() && time.Now().Before(gone); {
		time.Sleep(100 * time.Millisecond)
	}
	for !ready() {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("the gateway %s was not ready again within %s", gateway, within)
		}
		time.Sleep(250 * time.Millisecond)
	}
	return nil
}
