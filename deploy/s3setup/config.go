package main

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/acme/platform/pkg/config"
	"github.com/minio/minio-go/v7/pkg/s3utils"
)

// Settings is every setting the job reads, each defined here once (the
// object store's address and bucket are shared with the files service,
// pkg/config's S3 table); docs/configuration.md is generated from it.
var Settings = config.Join(config.S3.Pick("S3_ENDPOINT", "S3_USE_TLS", "S3_BUCKET"), config.Table{
	{Key: "S3_ROOT_USER", File: true, DefaultDoc: "required", Doc: "MinIO's root user (`MINIO_ROOT_USER`)"},
	{Key: "S3_ROOT_PASSWORD", File: true, Secret: true, DefaultDoc: "required", Doc: "MinIO's root password"},
	{Key: "S3_FILES_ACCESS_KEY", File: true, DefaultDoc: "required", Doc: "the files service's access key (user name); the service's `S3_ACCESS_KEY` is the same"},
	{Key: "S3_FILES_SECRET_KEY", File: true, Secret: true, DefaultDoc: "required", Doc: "its secret key, at least 8 characters; the service's `S3_SECRET_KEY` is the same"},
	{Key: "S3_FILES_POLICY", Default: "acme-files-bucket", Doc: "the canned policy's name"},
	{Key: "S3_SETUP_TIMEOUT", Kind: config.Duration, Default: "60s", Doc: "how long to wait for MinIO, and to finish"},
})

// Config is what the job needs; see Settings for the variables.
type Config struct {
	Endpoint     string
	UseTLS       bool
	RootUser     string
	RootPassword string
	Bucket       string
	AccessKey    string // the files service's
	SecretKey    string
	Policy       string
	Timeout      time.Duration
}

func loadConfig(getenv func(string) string) (Config, error) {
	r := config.New("", getenv, Settings)
	c := Config{
		Endpoint:     r.String("S3_ENDPOINT"),
		UseTLS:       r.Bool("S3_USE_TLS"),
		RootUser:     r.String("S3_ROOT_USER"),
		RootPassword: r.String("S3_ROOT_PASSWORD"),
		Bucket:       r.String("S3_BUCKET"),
		AccessKey:    r.String("S3_FILES_ACCESS_KEY"),
		SecretKey:    r.String("S3_FILES_SECRET_KEY"),
		Policy:       r.String("S3_FILES_POLICY"),
		Timeout:      r.Duration("S3_SETUP_TIMEOUT"),
	}
	var problems []string
	if err := r.Err(); err != nil {
		problems = append(problems, err.Error())
	}
	for _, req := range []struct{ name, value string }{
		{"S3_ENDPOINT", c.Endpoint},
		{"S3_ROOT_USER", c.RootUser},
		{"S3_ROOT_PASSWORD", c.RootPassword},
		{"S3_FILES_ACCESS_KEY", c.AccessKey},
		{"S3_FILES_SECRET_KEY", c.SecretKey},
		{"S3_FILES_POLICY", c.Policy},
	} {
		if req.value == "" {
			name := req.name
			if Settings.Pick(req.name)[0].File {
				name += " (or " + req.name + config.FileSuffix + ")"
			}
			problems = append(problems, name+" is required")
		}
	}
	problems = append(problems, c.check()...)
	if len(problems) > 0 {
		return c, errors.New(strings.Join(problems, "; "))
	}
	return c, nil
}

// check returns the problems of values that are set but cannot work.
func (c Config) check() []string {
	var problems []string
	if strings.Contains(c.Endpoint, "/") {
		problems = append(problems, fmt.Sprintf("S3_ENDPOINT %q must be host:port, without a scheme or path (S3_USE_TLS picks https)", c.Endpoint))
	}
	if err := s3utils.CheckValidBucketNameStrict(c.Bucket); err != nil {
		problems = append(problems, fmt.Sprintf("S3_BUCKET %q: %v", c.Bucket, err))
	}
	// MinIO's own rules for users (cmd/iam.go CreateUser, admin AddUser).
	if c.AccessKey != "" {
		if len(c.AccessKey) < 3 || strings.ContainsAny(c.AccessKey, "=,") {
			problems = append(problems, "S3_FILES_ACCESS_KEY must be at least 3 characters, without '=' or ','")
		}
		if c.AccessKey == c.RootUser {
			problems = append(problems, "S3_FILES_ACCESS_KEY must differ from S3_ROOT_USER: the files service must not use the root credentials")
		}
	}
	if c.SecretKey != "" && len(c.SecretKey) < 8 {
		problems = append(problems, "S3_FILES_SECRET_KEY must be at least 8 characters")
	}
	if c.SecretKey != "" && c.SecretKey == c.RootPassword {
		problems = append(problems, "S3_FILES_SECRET_KEY must differ from S3_ROOT_PASSWORD")
	}
	if strings.ContainsAny(c.Policy, ", ") {
		problems = append(problems, fmt.Sprintf("S3_FILES_POLICY %q must not contain ',' or spaces", c.Policy))
	}
	if c.Timeout <= 0 {
		problems = append(problems, "S3_SETUP_TIMEOUT must be positive")
	}
	return problems
}
