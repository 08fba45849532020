// Command acme-backup takes, checks, lists and restores backups of the
// platform: the MongoDB database in mongodump's layout, every object of the
// files bucket, and a manifest (internal/backup). It runs once
// (`backup`, `restore`, `verify`, `list`) or as a service of the stack
// that takes backups on a cron schedule and keeps the last few
// (`schedule`). Operator guide: docs/operations.md, "Backups".
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"filippo.io/age"
	"github.com/acme/platform/pkg/config"
	"github.com/acme/platform/pkg/healthcheck"
	"github.com/acme/platform/pkg/mongox"
	"github.com/acme/platform/services/backup/internal/backup"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Prefix of acme-backup's own settings.
const Prefix = "BACKUP"

// Table is acme-backup's own settings; it also reads the shared MongoDB,
// S3 and NATS settings the services read.
var Table = config.Table{
	{Key: "ADDR", Default: "127.0.0.1:8087", Doc: "`schedule`: listen address of /healthz, /readyz and /metrics"},
	{Key: "SCHEDULE", Doc: "`schedule`: a cron expression (5 fields, or @daily, @every 6h), in UTC"},
	{Key: "KEEP", Kind: config.Int, Default: "7", Doc: "`schedule`: backups kept under `BACKUP_TO`; older ones are removed after a successful backup"},
	{Key: "TO", Doc: "`schedule`: where backups go: a directory or s3://bucket/prefix; each is a folder acme-<time> under it"},
	{Key: "WORKERS", Kind: config.Int, Default: "4", Doc: "objects copied at once"},
	{Key: "TARGET_S3_ENDPOINT", Doc: "host:port of the object store holding s3:// targets (not the platform's)"},
	{Key: "TARGET_S3_USE_TLS", Kind: config.Bool, Default: "true", Doc: "`true` for https to `BACKUP_TARGET_S3_ENDPOINT`"},
	{Key: "TARGET_S3_REGION", Doc: "its region (AWS S3)"},
	{Key: "TARGET_S3_ACCESS_KEY", File: true, Doc: "its access key"},
	{Key: "TARGET_S3_SECRET_KEY", File: true, Secret: true, Doc: "its secret key"},
	{Key: "AGE_RECIPIENTS", Kind: config.List, Doc: "age public keys (age1…): every file of a backup is encrypted to them; none: in clear"},
	{Key: "AGE_IDENTITY", File: true, Secret: true, Doc: "age identity (AGE-SECRET-KEY-1…) that opens encrypted backups (restore, verify, list)"},
	{Key: "AUTH_MFA_KEY", Shared: true, File: true, Secret: true, Doc: "auth's key sealing TOTP secrets: its check value goes into the manifest, and a restore refuses a backup of another key"},
	{Key: "ACME_VERSION", Shared: true, Default: "dev", Doc: "the platform's version, written into the manifest"},
}

func main() {
	if healthcheck.Requested(os.Args[1:]) {
		addr := config.New(Prefix, os.Getenv, Table).String("ADDR")
		os.Exit(healthcheck.Probe(addr, addr, os.Stderr))
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "acme-backup:", err)
		os.Exit(1)
	}
}

const usage = `usage: acme-backup <command> [flags] [where]

  backup TO              take a backup into TO (a directory or s3://bucket/prefix)
  restore [--replace] FROM
                         restore FROM into an empty platform (--replace: into one that holds data)
  verify [--platform] [--hashes] FROM
                         check FROM against its manifest (--platform: the platform against it)
  list WHERE             the backups under WHERE (or WHERE itself)
  dev-secrets FROM       print make run's dev-secrets.json kept in FROM (make restore DEV_SECRETS=1)
  schedule               take backups on BACKUP_SCHEDULE into BACKUP_TO, keep BACKUP_KEEP

Settings come from the environment (docs/operations.md, "Backups").`

// settings is what every command reads.
type settings struct {
	r        *config.Reader
	workers  int
	keys     backup.Keys
	login    backup.S3Login
	mfaKey   string
	version  string
	identity string
}

func readSettings(getenv func(string) string) (*settings, error) {
	r := config.New(Prefix, config.Getenv(getenv), config.Logging, config.Mongo, config.S3, config.NATS, Table)
	s := &settings{r: r, workers: r.Int("WORKERS"), mfaKey: r.String("AUTH_MFA_KEY"), version: r.String("ACME_VERSION"),
		login: backup.S3Login{Endpoint: r.String("TARGET_S3_ENDPOINT"), UseTLS: r.Bool("TARGET_S3_USE_TLS"), Region: r.String("TARGET_S3_REGION"),
			AccessKey: r.String("TARGET_S3_ACCESS_KEY"), SecretKey: r.String("TARGET_S3_SECRET_KEY")}}
	for _, rc := range r.List("AGE_RECIPIENTS") {
		rec, err := age.ParseX25519Recipient(strings.TrimSpace(rc))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", r.Name("AGE_RECIPIENTS"), err)
		}
		s.keys.Recipients = append(s.keys.Recipients, rec)
	}
	if id := strings.TrimSpace(r.String("AGE_IDENTITY")); id != "" {
		ids, err := age.ParseIdentities(strings.NewReader(id))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", r.Name("AGE_IDENTITY"), err)
		}
		s.keys.Identities = ids
	}
	return s, r.Err()
}

// platform connects to the platform's MongoDB and object store.
func (s *settings) platform(ctx context.Context) (backup.Platform, func(), error) {
	mc, disconnect, err := mongox.Connect(ctx, options.Client().ApplyURI(s.r.MongoURL()), 30*time.Second)
	if err != nil {
		return backup.Platform{}, nil, err
	}
	oc, err := minio.New(s.r.String("S3_ENDPOINT"), &minio.Options{
		Creds:  credentials.NewStaticV4(s.r.String("S3_ACCESS_KEY"), s.r.String("S3_SECRET_KEY"), ""),
		Secure: s.r.Bool("S3_USE_TLS"),
	})
	if err != nil {
		disconnect()
		return backup.Platform{}, nil, err
	}
	return backup.Platform{DB: mc.Database(s.r.String("MONGO_DB")), Objects: oc, Bucket: s.r.String("S3_BUCKET"),
		MFAKey: s.mfaKey, Version: s.version}, disconnect, nil
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	if len(args) == 0 {
		return errors.New(usage)
	}
	cmd, args := args[0], args[1:]
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(stdout)
	replace := fs.Bool("replace", false, "restore: remove the platform's data first, whatever it holds")
	onPlatform := fs.Bool("platform", false, "verify: compare the platform with the backup's manifest")
	hashes := fs.Bool("hashes", false, "verify --platform: read every object again and compare its SHA-256")
	devSecrets := fs.String("dev-secrets", "", "backup: also keep this file (make run's dev-secrets.json) in the backup")
	if err := fs.Parse(args); err != nil {
		return err
	}
	s, err := readSettings(getenv)
	if err != nil {
		return err
	}
	progress := func(format string, a ...any) { fmt.Fprintf(stdout, format+"\n", a...) }
	switch cmd {
	case "schedule":
		return schedule(ctx, s, stdout)
	case "backup", "restore", "verify", "list", "dev-secrets":
	default:
		return fmt.Errorf("unknown command %q\n%s", cmd, usage)
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("%s needs one place (a directory or s3://bucket/prefix)\n%s", cmd, usage)
	}
	t, err := backup.OpenTarget(fs.Arg(0), s.login)
	if err != nil {
		return err
	}
	switch cmd {
	case "backup":
		p, done, err := s.platform(ctx)
		if err != nil {
			return err
		}
		defer done()
		o := backup.Options{Keys: s.keys, Workers: s.workers, Progress: progress}
		if *devSecrets != "" {
			if o.DevSecrets, err = os.ReadFile(*devSecrets); err != nil {
				return err
			}
		}
		m, err := backup.Take(ctx, p, t, o)
		if err != nil {
			return err
		}
		printSummary(stdout, t.String(), m)
		return nil
	case "restore":
		p, done, err := s.platform(ctx)
		if err != nil {
			return err
		}
		defer done()
		m, err := backup.Restore(ctx, p, t, backup.RestoreOptions{Keys: s.keys, Replace: *replace, Workers: s.workers, Progress: progress})
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "restored and verified: %s\n", t)
		printSummary(stdout, t.String(), m)
		return nil
	case "verify":
		rep, err := backup.VerifyBackup(ctx, t, s.keys, s.workers)
		if err != nil {
			return err
		}
		if rep.OK() && *onPlatform {
			p, done, err := s.platform(ctx)
			if err != nil {
				return err
			}
			defer done()
			if rep, err = backup.VerifyPlatform(ctx, p, rep.Manifest, *hashes, s.workers); err != nil {
				return err
			}
		}
		if !rep.OK() {
			return fmt.Errorf("%s: %d differences from the manifest:\n  %s", t, len(rep.Problems), strings.Join(rep.Problems, "\n  "))
		}
		what := "every count and hash agrees with the manifest"
		if *onPlatform {
			what = "the backup, and the platform's counts and objects, agree with the manifest"
		}
		fmt.Fprintf(stdout, "verified %s: %s\n", t, what)
		return nil
	case "list":
		return list(ctx, stdout, t, s.keys)
	case "dev-secrets":
		b, err := backup.ReadDevSecrets(ctx, t, s.keys)
		if err != nil {
			return err
		}
		_, err = stdout.Write(b)
		return err
	}
	return nil
}

func printSummary(w io.Writer, where string, m *backup.Manifest) {
	var docs, bytes int64
	for _, c := range m.Collections {
		docs += c.Documents
	}
	for _, o := range m.Objects {
		bytes += o.Size
	}
	enc := "in clear (password hashes, sealed TOTP secrets and every file are readable)"
	if m.Encrypted {
		enc = "encrypted with age"
	}
	fmt.Fprintf(w, "%s: cut %s, %d collections, %d documents, %d objects (%d bytes), %s\n",
		where, m.Cut.Format(time.RFC3339), len(m.Collections), docs, len(m.Objects), bytes, enc)
}

func list(ctx context.Context, w io.Writer, t backup.Target, keys backup.Keys) error {
	names, err := t.Backups(ctx)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if len(names) == 0 {
		// WHERE may be one backup itself.
		m, err := backup.ReadManifest(ctx, t, keys)
		if err != nil {
			return err
		}
		printSummary(w, t.String(), m)
		return nil
	}
	for _, n := range names {
		m, err := backup.ReadManifest(ctx, t.Sub(n), keys)
		if err != nil {
			fmt.Fprintf(w, "%s: %v\n", n, err)
			continue
		}
		printSummary(w, n, m)
	}
	return nil
}
