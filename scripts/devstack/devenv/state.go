package devenv

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/acme/platform/scripts/stack"
)

// StateFile is where a running `make run` says where its servers are,
// under DATA_DIR (mode 0600), for `make backup` and `make restore`. It is
// removed when `make run` stops.
const StateFile = "devstack.json"

// State is a running `make run`: its process, which restarts its services
// on SIGHUP (taking auth's secrets from dev-secrets.json again), and its
// servers' addresses (the logins are in dev-secrets.json).
type State struct {
	PID        int    `json:"pid"`
	GatewayURL string `json:"gatewayURL"`
	MongoURL   string `json:"mongoURL"`
	MongoDB    string `json:"mongoDB"`
	S3Endpoint string `json:"s3Endpoint"`
	S3Bucket   string `json:"s3Bucket"`
	NATSURL    string `json:"natsURL"`
	// Held: SIGUSR1 stopped the services until SIGHUP (make restore).
	Held bool `json:"held,omitempty"`
}

// StatePath is DATA_DIR's state file.
func StatePath(dataDir string) string { return filepath.Join(dataDir, StateFile) }

// WriteState keeps the state of the platform p on these servers.
func (s *Servers) WriteState(p *stack.Platform) error {
	ss := s.StackServers()
	b, _ := json.MarshalIndent(State{PID: os.Getpid(), GatewayURL: p.GatewayURL, MongoURL: s.MongoURL, MongoDB: ss.MongoDB,
		S3Endpoint: ss.S3Endpoint, S3Bucket: ss.S3Bucket, NATSURL: s.NATSURL, Held: p.Held()}, "", "  ")
	path := StatePath(s.cfg.DataDir)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// RemoveState removes the state file (make run stopped).
func (s *Servers) RemoveState() { os.Remove(StatePath(s.cfg.DataDir)) }

// ReadState reads the state of the `make run` on dataDir.
func ReadState(dataDir string) (State, error) {
	var st State
	b, err := os.ReadFile(StatePath(dataDir))
	if errors.Is(err, fs.ErrNotExist) {
		return st, fmt.Errorf("no %s: `make run` is not running on DATA_DIR=%s", StatePath(dataDir), dataDir)
	}
	if err != nil {
		return st, err
	}
	return st, json.Unmarshal(b, &st)
}

// ReadSecrets reads dev-secrets.json without adding to it.
func ReadSecrets(path string) (Secrets, error) {
	var sec Secrets
	b, err := os.ReadFile(path)
	if err != nil {
		return sec, err
	}
	return sec, json.Unmarshal(b, &sec)
}

// WriteSecrets replaces dev-secrets.json (mode 0600).
func WriteSecrets(path string, sec Secrets) error {
	b, err := json.MarshalIndent(sec, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// AuthSecrets are the variables of auth that dev-secrets.json decides and a
// restore may change (the TOTP key and the first administrator): Reload
// sets them from the file for the next start.
func AuthSecrets(sec Secrets) map[string]string {
	return map[string]string{"AUTH_MFA_KEY": sec.MFAKey, "ADMIN_EMAIL": sec.AdminEmail, "ADMIN_PASSWORD": sec.AdminPassword}
}

// Reload reads dev-secrets.json again and (re)starts the services of p
// with auth's secrets from it: after `make restore`, no service keeps what
// it had cached of the data the restore replaced, and auth opens the
// restored TOTP secrets with the key they were sealed with. Services held
// (Hold, during a restore) are released; running ones are stopped, and the
// supervisor (stack.Platform.Supervise) starts each again.
func (s *Servers) Reload(p *stack.Platform) error {
	sec, err := ReadSecrets(s.SecretsFile)
	if err != nil {
		return err
	}
	s.Secrets.MFAKey, s.Secrets.AdminEmail, s.Secrets.AdminPassword = sec.MFAKey, sec.AdminEmail, sec.AdminPassword
	for k, v := range AuthSecrets(sec) {
		p.SetEnv("auth", k, v)
	}
	if p.Held() {
		p.Release()
		return nil
	}
	for _, name := range slices.Backward(stack.Services) { // the gateway first: it answers 503 meanwhile
		if proc := p.Proc(name); proc != nil {
			proc.Stop(20 * time.Second)
		}
	}
	return nil
}
