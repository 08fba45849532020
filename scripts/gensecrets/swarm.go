package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"github.com/compose-spec/compose-go/v2/dotenv"
)

// swarmSecrets are the Docker secrets of deploy/stack.yaml, each with the
// .env variable compose.yaml takes the same secret from (TestSwarmSecrets
// holds the two files and this list together).
var swarmSecrets = map[string]string{
	"mongo_root_password":     "MONGO_ROOT_PASSWORD",
	"mongo_app_password":      "MONGO_APP_PASSWORD",
	"identity_private_key":    "IDENTITY_PRIVATE_KEY",
	"service_credential":      "SERVICE_CREDENTIAL",
	"admin_password":          "ADMIN_PASSWORD",
	"mfa_key":                 "MFA_KEY",
	"minio_root_user":         "MINIO_ROOT_USER",
	"minio_root_password":     "MINIO_ROOT_PASSWORD",
	"s3_access_key":           "S3_ACCESS_KEY",
	"s3_secret_key":           "S3_SECRET_KEY",
	"nats_auth_password":      "NATS_AUTH_PASSWORD",
	"nats_files_password":     "NATS_FILES_PASSWORD",
	"nats_logs_password":      "NATS_LOGS_PASSWORD",
	"nats_gateway_password":   "NATS_GATEWAY_PASSWORD",
	"nats_publisher_password": "NATS_PUBLISHER_PASSWORD",
}

// secretFilesFrom writes the Docker secrets of an existing .env.
func secretFilesFrom(envPath, dir string) error {
	f, err := os.Open(envPath)
	if err != nil {
		return err
	}
	defer f.Close()
	return writeSecretFiles(f, dir)
}

// writeSecretFiles writes each Docker secret's value, read from .env text,
// to dir/<name> (dir mode 0700, files 0600, the value without a newline, as
// compose hands it to the containers). It refuses to replace a file: a
// secret in use changes only by the rotation in docs/deployment.md.
func writeSecretFiles(env io.Reader, dir string) error {
	values, err := dotenv.Parse(env)
	if err != nil {
		return fmt.Errorf("reading the .env: %w", err)
	}
	names := make([]string, 0, len(swarmSecrets))
	for name, key := range swarmSecrets {
		if values[key] == "" {
			return fmt.Errorf("the .env has no %s (secret %s)", key, name)
		}
		names = append(names, name)
	}
	sort.Strings(names)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for _, name := range names {
		path := filepath.Join(dir, name)
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("%s exists; refusing to replace a secret", path)
		}
		if err != nil {
			return err
		}
		_, err = f.WriteString(values[swarmSecrets[name]])
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}
