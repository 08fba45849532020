package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/acme/platform/pkg/config"
	"github.com/minio/madmin-go/v3"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/s3utils"
)

// Config is what the job needs; see the package comment for the variables.
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
	r := config.New("", getenv)
	c := Config{
		Endpoint:     r.String("S3_ENDPOINT", "127.0.0.1:9000"),
		UseTLS:       r.Bool("S3_USE_TLS", false),
		RootUser:     r.String("S3_ROOT_USER", ""),
		RootPassword: r.Secret("S3_ROOT_PASSWORD", ""),
		Bucket:       r.String("S3_BUCKET", "acme-files"),
		AccessKey:    r.String("S3_FILES_ACCESS_KEY", ""),
		SecretKey:    r.Secret("S3_FILES_SECRET_KEY", ""),
		Policy:       r.String("S3_FILES_POLICY", "acme-files-bucket"),
		Timeout:      r.Duration("S3_SETUP_TIMEOUT", 60*time.Second),
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
			problems = append(problems, req.name+" (or "+req.name+"_FILE) is required")
		}
	}
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
	if len(problems) > 0 {
		return c, errors.New(strings.Join(problems, "; "))
	}
	return c, nil
}

// The policy language (a subset of AWS IAM's that MinIO reads).
type policyDoc struct {
	Version   string
	Statement []statement
}

type statement struct {
	Sid      string `json:",omitempty"`
	Effect   string
	Action   []string
	Resource []string
}

// filesPolicy allows what services/files/internal/s3store does, on bucket
// only:
//   - s3:ListBucket: BucketExists (HEAD bucket, at start-up and in the
//     readiness check) and ListObjects (the orphan sweep);
//   - s3:GetBucketLocation: minio-go asks for a bucket's region before its
//     first request on it (it would fall back to us-east-1 when denied, but
//     only after a refused request);
//   - s3:PutObject: PutObject, including the multipart uploads it streams
//     (create, upload part, complete);
//   - s3:AbortMultipartUpload: what minio-go does when a streamed upload
//     fails halfway;
//   - s3:GetObject: GetObject and StatObject (HEAD object);
//   - s3:DeleteObject: RemoveObject.
//
// Not s3:CreateBucket: this job creates the bucket, so the service's
// EnsureBucket finds it and never calls MakeBucket. Nothing else: no other
// bucket, no listing of buckets, no bucket policy or configuration, no
// admin API.
func filesPolicy(bucket string) policyDoc {
	return policyDoc{
		Version: "2012-10-17",
		Statement: []statement{
			{
				Sid:      "FilesBucket",
				Effect:   "Allow",
				Action:   []string{"s3:GetBucketLocation", "s3:ListBucket"},
				Resource: []string{"arn:aws:s3:::" + bucket},
			},
			{
				Sid:    "FilesObjects",
				Effect: "Allow",
				Action: []string{
					"s3:AbortMultipartUpload",
					"s3:DeleteObject",
					"s3:GetObject",
					"s3:PutObject",
				},
				Resource: []string{"arn:aws:s3:::" + bucket + "/*"},
			},
		},
	}
}

// samePolicy reports whether the stored document says exactly what want
// says; any field this program does not write (Condition, NotAction, ...)
// counts as a difference.
func samePolicy(stored []byte, want policyDoc) bool {
	dec := json.NewDecoder(bytes.NewReader(stored))
	dec.DisallowUnknownFields()
	var got policyDoc
	if err := dec.Decode(&got); err != nil {
		return false
	}
	norm := func(p policyDoc) policyDoc {
		out := policyDoc{Version: p.Version}
		for _, s := range p.Statement {
			s.Action = slices.Sorted(slices.Values(s.Action))
			s.Resource = slices.Sorted(slices.Values(s.Resource))
			out.Statement = append(out.Statement, s)
		}
		slices.SortFunc(out.Statement, func(a, b statement) int { return strings.Compare(a.Sid, b.Sid) })
		return out
	}
	g, w := norm(got), norm(want)
	a, _ := json.Marshal(g)
	b, _ := json.Marshal(w)
	return bytes.Equal(a, b)
}

// run does the job and returns the line to print.
func run(parent context.Context, c Config) (string, error) {
	ctx, cancel := context.WithTimeout(parent, c.Timeout)
	defer cancel()
	creds := credentials.NewStaticV4(c.RootUser, c.RootPassword, "")
	// One attempt per call: the retries are ours (retry), bounded by the
	// timeout, so that a failure reports MinIO's answer, not a deadline.
	s3, err := minio.New(c.Endpoint, &minio.Options{Creds: creds, Secure: c.UseTLS, MaxRetries: 1})
	if err != nil {
		return "", fmt.Errorf("S3_ENDPOINT %q: %w", c.Endpoint, err)
	}
	adm, err := madmin.NewWithOptions(c.Endpoint, &madmin.Options{Creds: creds, Secure: c.UseTLS})
	if err != nil {
		return "", fmt.Errorf("S3_ENDPOINT %q: %w", c.Endpoint, err)
	}
	adm.SetAppInfo("acme-s3setup", "1")
	start := time.Now()
	scheme := map[bool]string{false: "http", true: "https"}[c.UseTLS]
	where := fmt.Sprintf("MinIO at %s://%s", scheme, c.Endpoint)

	// 1. MinIO answers, to the root credentials (and the bucket's state).
	var exists bool
	if err := retry(ctx, func(ctx context.Context) (err error) {
		exists, err = s3.BucketExists(ctx, c.Bucket)
		return err
	}); err != nil {
		switch {
		case parent.Err() != nil:
			return "", fmt.Errorf("interrupted while waiting for %s: %w", where, err)
		case ctx.Err() != nil:
			return "", fmt.Errorf("%s did not answer within %s (S3_SETUP_TIMEOUT): %w", where, time.Since(start).Round(time.Second), err)
		}
		return "", fmt.Errorf("%s: checking bucket %q with the root credentials (S3_ROOT_USER): %w", where, c.Bucket, describe(err))
	}
	step := func(what string, f func(context.Context) error) error {
		if err := retry(ctx, f); err != nil {
			return fmt.Errorf("%s: %s: %w", where, what, describe(err))
		}
		return nil
	}

	// 2. The bucket.
	bucketDid := "exists"
	if !exists {
		if err := step("creating bucket "+c.Bucket, func(ctx context.Context) error {
			err := s3.MakeBucket(ctx, c.Bucket, minio.MakeBucketOptions{})
			if code := minio.ToErrorResponse(err).Code; code == "BucketAlreadyOwnedByYou" || code == "BucketAlreadyExists" {
				return nil // created meanwhile (an earlier attempt that timed out)
			}
			return err
		}); err != nil {
			return "", err
		}
		bucketDid = "created"
	}

	// 3. The policy.
	want := filesPolicy(c.Bucket)
	doc, err := json.Marshal(want)
	if err != nil {
		return "", err
	}
	policyDid := "unchanged"
	var stored *madmin.PolicyInfo
	if err := step("reading policy "+c.Policy, func(ctx context.Context) error {
		p, err := adm.InfoCannedPolicyV2(ctx, c.Policy)
		if adminCode(err) == "XMinioAdminNoSuchPolicy" {
			p, err = nil, nil
		}
		stored = p
		return err
	}); err != nil {
		return "", err
	}
	if stored == nil || !samePolicy(stored.Policy, want) {
		policyDid = "updated"
		if stored == nil {
			policyDid = "created"
		}
		if err := step("writing policy "+c.Policy, func(ctx context.Context) error {
			return adm.AddCannedPolicy(ctx, c.Policy, doc)
		}); err != nil {
			return "", err
		}
	}

	// 4. The user: AddUser creates it, or sets the secret key of an
	// existing one and enables it; its policies are kept.
	userDid := "updated"
	if err := step("reading user "+c.AccessKey, func(ctx context.Context) error {
		_, err := adm.GetUserInfo(ctx, c.AccessKey)
		if adminCode(err) == "XMinioAdminNoSuchUser" {
			userDid = "created"
			return nil
		}
		return err
	}); err != nil {
		return "", err
	}
	if err := step("setting user "+c.AccessKey, func(ctx context.Context) error {
		return adm.AddUser(ctx, c.AccessKey, c.SecretKey)
	}); err != nil {
		return "", err
	}

	// 5. The user's policies: exactly ours.
	var info madmin.UserInfo
	if err := step("reading user "+c.AccessKey, func(ctx context.Context) (err error) {
		info, err = adm.GetUserInfo(ctx, c.AccessKey)
		return err
	}); err != nil {
		return "", err
	}
	var others []string
	has := false
	for _, p := range strings.Split(info.PolicyName, ",") {
		switch p = strings.TrimSpace(p); p {
		case "":
		case c.Policy:
			has = true
		default:
			others = append(others, p)
		}
	}
	attachDid := "policy already attached"
	if len(others) > 0 {
		if err := step("detaching policies "+strings.Join(others, ",")+" from user "+c.AccessKey, func(ctx context.Context) error {
			_, err := adm.DetachPolicy(ctx, madmin.PolicyAssociationReq{Policies: others, User: c.AccessKey})
			if adminCode(err) == "XMinioAdminPolicyChangeAlreadyApplied" {
				return nil
			}
			return err
		}); err != nil {
			return "", err
		}
		attachDid = "detached " + strings.Join(others, ",")
	}
	if !has {
		if err := step("attaching policy "+c.Policy+" to user "+c.AccessKey, func(ctx context.Context) error {
			_, err := adm.AttachPolicy(ctx, madmin.PolicyAssociationReq{Policies: []string{c.Policy}, User: c.AccessKey})
			if adminCode(err) == "XMinioAdminPolicyChangeAlreadyApplied" {
				return nil
			}
			return err
		}); err != nil {
			return "", err
		}
		if len(others) > 0 {
			attachDid += ", policy attached"
		} else {
			attachDid = "policy attached"
		}
	}
	groups := ""
	if len(info.MemberOf) > 0 {
		// Group policies add to the user's; this job creates no groups.
		groups = fmt.Sprintf(" (note: member of groups %s, whose policies also apply)", strings.Join(info.MemberOf, ","))
	}
	return fmt.Sprintf("%s: bucket %s %s; policy %s %s; user %s %s, %s%s",
		where, c.Bucket, bucketDid, c.Policy, policyDid, c.AccessKey, userDid, attachDid, groups), nil
}

// retry calls f until it succeeds, fails for good, or ctx ends; each
// attempt has at most 10 s, and failed ones are retried with backoff from
// 250 ms to 4 s. It returns the last error.
func retry(ctx context.Context, f func(context.Context) error) error {
	wait := 250 * time.Millisecond
	for {
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := f(actx)
		cancel()
		if err == nil || !transient(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait = min(2*wait, 4*time.Second)
	}
}

// transient: MinIO not (yet) reachable or not ready: network errors, 5xx
// (XMinioServerNotInitialized, XMinioIAMNotInitialized, ...), cut answers
// and timeouts of one attempt.
func transient(err error) bool {
	var ne net.Error
	var ue *url.Error
	if errors.As(err, &ne) || errors.As(err, &ue) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	if r := minio.ToErrorResponse(err); r.StatusCode >= http.StatusInternalServerError {
		return true
	}
	switch adminCode(err) {
	case "XMinioServerNotInitialized", "XMinioIAMNotInitialized", "XMinioBackendDown",
		"SlowDown", "SlowDownRead", "SlowDownWrite", "ServiceUnavailable", "InternalError":
		return true
	}
	return false
}

func adminCode(err error) string {
	if err == nil {
		return ""
	}
	var r madmin.ErrorResponse
	if errors.As(err, &r) {
		return r.Code
	}
	return ""
}

// describe adds a hint to the answers a wrong setting gives.
func describe(err error) error {
	code := minio.ToErrorResponse(err).Code
	if code == "" {
		code = adminCode(err)
	}
	switch code {
	case "InvalidAccessKeyId", "SignatureDoesNotMatch":
		return fmt.Errorf("%w (check S3_ROOT_USER and S3_ROOT_PASSWORD: they must be MinIO's root credentials)", err)
	case "AccessDenied", "XMinioAdminAccessDenied":
		return fmt.Errorf("%w (S3_ROOT_USER must be MinIO's root user, not a restricted one)", err)
	}
	return err
}
