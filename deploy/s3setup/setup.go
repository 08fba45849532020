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

	"github.com/minio/madmin-go/v3"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

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
	scheme := map[bool]string{false: "http", true: "https"}[c.UseTLS]
	j := &setup{c: c, s3: s3, adm: adm, where: fmt.Sprintf("MinIO at %s://%s", scheme, c.Endpoint)}

	// 1. MinIO answers, to the root credentials (and the bucket's state).
	exists, err := j.reach(parent, ctx)
	if err != nil {
		return "", err
	}
	// 2. The bucket. 3. The policy. 4. The user. 5. The user's policies.
	bucketDid, err := j.bucket(ctx, exists)
	if err != nil {
		return "", err
	}
	policyDid, err := j.policy(ctx)
	if err != nil {
		return "", err
	}
	userDid, err := j.user(ctx)
	if err != nil {
		return "", err
	}
	attachDid, groups, err := j.attach(ctx)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s: bucket %s %s; policy %s %s; user %s %s, %s%s",
		j.where, c.Bucket, bucketDid, c.Policy, policyDid, c.AccessKey, userDid, attachDid, groups), nil
}

// setup is one run's clients; each method is one step and says what it did.
type setup struct {
	c     Config
	s3    *minio.Client
	adm   *madmin.AdminClient
	where string // "MinIO at http://host:port", for messages
}

// step runs f with retries and names what failed.
func (j *setup) step(ctx context.Context, what string, f func(context.Context) error) error {
	if err := retry(ctx, f); err != nil {
		return fmt.Errorf("%s: %s: %w", j.where, what, describe(err))
	}
	return nil
}

// reach waits until MinIO answers the root credentials and reports
// whether the bucket exists.
func (j *setup) reach(parent, ctx context.Context) (bool, error) {
	start := time.Now()
	var exists bool
	err := retry(ctx, func(ctx context.Context) (err error) {
		exists, err = j.s3.BucketExists(ctx, j.c.Bucket)
		return err
	})
	switch {
	case err == nil:
		return exists, nil
	case parent.Err() != nil:
		return false, fmt.Errorf("interrupted while waiting for %s: %w", j.where, err)
	case ctx.Err() != nil:
		return false, fmt.Errorf("%s did not answer within %s (S3_SETUP_TIMEOUT): %w", j.where, time.Since(start).Round(time.Second), err)
	}
	return false, fmt.Errorf("%s: checking bucket %q with the root credentials (S3_ROOT_USER): %w", j.where, j.c.Bucket, describe(err))
}

// bucket creates the bucket unless it exists.
func (j *setup) bucket(ctx context.Context, exists bool) (string, error) {
	if exists {
		return "exists", nil
	}
	err := j.step(ctx, "creating bucket "+j.c.Bucket, func(ctx context.Context) error {
		err := j.s3.MakeBucket(ctx, j.c.Bucket, minio.MakeBucketOptions{})
		if code := minio.ToErrorResponse(err).Code; code == "BucketAlreadyOwnedByYou" || code == "BucketAlreadyExists" {
			return nil // created meanwhile (an earlier attempt that timed out)
		}
		return err
	})
	return "created", err
}

// policy creates or replaces the canned policy when it differs.
func (j *setup) policy(ctx context.Context) (string, error) {
	want := filesPolicy(j.c.Bucket)
	doc, err := json.Marshal(want)
	if err != nil {
		return "", err
	}
	var stored *madmin.PolicyInfo
	if err := j.step(ctx, "reading policy "+j.c.Policy, func(ctx context.Context) error {
		p, err := j.adm.InfoCannedPolicyV2(ctx, j.c.Policy)
		if adminCode(err) == "XMinioAdminNoSuchPolicy" {
			p, err = nil, nil
		}
		stored = p
		return err
	}); err != nil {
		return "", err
	}
	if stored != nil && samePolicy(stored.Policy, want) {
		return "unchanged", nil
	}
	did := "updated"
	if stored == nil {
		did = "created"
	}
	return did, j.step(ctx, "writing policy "+j.c.Policy, func(ctx context.Context) error {
		return j.adm.AddCannedPolicy(ctx, j.c.Policy, doc)
	})
}

// user creates the user, or sets the secret key of an existing one and
// enables it; its policies are kept.
func (j *setup) user(ctx context.Context) (string, error) {
	did := "updated"
	if err := j.step(ctx, "reading user "+j.c.AccessKey, func(ctx context.Context) error {
		_, err := j.adm.GetUserInfo(ctx, j.c.AccessKey)
		if adminCode(err) == "XMinioAdminNoSuchUser" {
			did = "created"
			return nil
		}
		return err
	}); err != nil {
		return "", err
	}
	return did, j.step(ctx, "setting user "+j.c.AccessKey, func(ctx context.Context) error {
		return j.adm.AddUser(ctx, j.c.AccessKey, j.c.SecretKey)
	})
}

// attach makes the policy the user's only one; groups notes the groups
// the user is a member of, whose policies also apply.
func (j *setup) attach(ctx context.Context) (did, groups string, err error) {
	var info madmin.UserInfo
	if err := j.step(ctx, "reading user "+j.c.AccessKey, func(ctx context.Context) (err error) {
		info, err = j.adm.GetUserInfo(ctx, j.c.AccessKey)
		return err
	}); err != nil {
		return "", "", err
	}
	var others []string
	has := false
	for _, p := range strings.Split(info.PolicyName, ",") {
		switch p = strings.TrimSpace(p); p {
		case "":
		case j.c.Policy:
			has = true
		default:
			others = append(others, p)
		}
	}
	did = "policy already attached"
	if len(others) > 0 {
		if err := j.associate(ctx, "detaching policies "+strings.Join(others, ",")+" from user "+j.c.AccessKey, others, j.adm.DetachPolicy); err != nil {
			return "", "", err
		}
		did = "detached " + strings.Join(others, ",")
	}
	if !has {
		if err := j.associate(ctx, "attaching policy "+j.c.Policy+" to user "+j.c.AccessKey, []string{j.c.Policy}, j.adm.AttachPolicy); err != nil {
			return "", "", err
		}
		if len(others) > 0 {
			did += ", policy attached"
		} else {
			did = "policy attached"
		}
	}
	if len(info.MemberOf) > 0 {
		// Group policies add to the user's; this job creates no groups.
		groups = fmt.Sprintf(" (note: member of groups %s, whose policies also apply)", strings.Join(info.MemberOf, ","))
	}
	return did, groups, nil
}

// associate attaches or detaches policies (change is the admin call); a
// change already applied is no error.
func (j *setup) associate(ctx context.Context, what string, policies []string,
	change func(context.Context, madmin.PolicyAssociationReq) (madmin.PolicyAssociationResp, error)) error {
	return j.step(ctx, what, func(ctx context.Context) error {
		_, err := change(ctx, madmin.PolicyAssociationReq{Policies: policies, User: j.c.AccessKey})
		if adminCode(err) == "XMinioAdminPolicyChangeAlreadyApplied" {
			return nil
		}
		return err
	})
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
