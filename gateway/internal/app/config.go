package app

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/acme/platform/gateway/internal/proxy"
	"github.com/acme/platform/pkg/config"
	"github.com/acme/platform/pkg/handoff"
)

// Prefix is the prefix of the gateway's own settings.
const Prefix = "GATEWAY"

// Settings is every setting the gateway reads besides the shared ones,
// each defined here once; loadConfig reads through it and
// docs/configuration.md is generated from it.
var Settings = config.Table{
	{Key: "ADDR", Default: "127.0.0.1:8080", Doc: "listen address"},
	{Key: "AUTH_URL", Kind: config.List, Default: "http://127.0.0.1:8081", Doc: "auth replicas; a host name is re-resolved and every address it has is balanced (least requests in flight, readiness-probed)"},
	{Key: "FILES_URL", Kind: config.List, Default: "http://127.0.0.1:8082", Doc: "files replicas (likewise)"},
	{Key: "LOGS_URL", Kind: config.List, Default: "http://127.0.0.1:8083", Doc: "logs replicas (likewise)"},
	{Key: "TUS_URL", Kind: config.List, Default: "http://127.0.0.1:8086", Doc: "the files replicas' tus listeners (`FILES_TUS_ADDR`; likewise): `/uploads` goes there"},
	{Key: "RESOLVE_INTERVAL", Kind: config.Duration, Default: "2s", Doc: "how often those host names are resolved again (also at once after a refused connection)"},
	{Key: "PROBE_INTERVAL", Kind: config.Duration, Default: "2s", Doc: "how often `GET /readyz` of every replica address runs; one failing it gets no new requests while another passes"},
	{Key: "PROBE_TIMEOUT", Kind: config.Duration, Default: "2s", Doc: "deadline of one probe"},
	{Key: "EJECT_BACKOFF_MAX", Kind: config.Duration, Default: "5s", Doc: "an address refusing connections is probed again after 0.5 s, doubling up to this"},
	{Key: "RETRY_WAIT", Kind: config.Duration, Default: "5s", Doc: "requests for a service with no usable replica are held this long for one, then 503; `0`: 503 at once"},
	{Key: "IDENTITY_PRIVATE_KEY", File: true, Secret: true, DefaultDoc: "required", Doc: "Ed25519 private key (PKCS#8 PEM or base64 seed) that signs identity tokens"},
	{Key: "SESSION_CACHE_TTL", Kind: config.Duration, Default: "5s", Doc: "how long a resolved session or API key is cached, at most until its own expiry (revocations evict at once)"},
	{Key: "TOKEN_TTL", Kind: config.Duration, Default: "30s", Doc: "lifetime of an identity token"},
	{Key: "ALLOWED_ORIGINS", Kind: config.List, Doc: "origins allowed to make credentialed cross-origin requests"},
	{Key: "PUBLIC_URL", Doc: "comma-separated origins (`scheme://host[:port]`) the platform is reached by: the `Host` names the gateway answers (besides IP addresses and `localhost`, 421 otherwise) and its own `Origin`s"},
	{Key: "READ_HEADER_TIMEOUT", Kind: config.Duration, Default: "10s", Doc: "slow-header (slowloris) limit"},
	{Key: "READ_TIMEOUT", Kind: config.Duration, Default: "0s", Doc: "whole-request bound; off (`0s`) because 1 GiB files stream through"},
	{Key: "WRITE_TIMEOUT", Kind: config.Duration, Default: "0s", Doc: "whole-response bound; off (`0s`) likewise"},
	{Key: "IDLE_TIMEOUT", Kind: config.Duration, Default: "120s", Doc: "idle keep-alive limit"},
	{Key: "BODY_IDLE_TIMEOUT", Kind: config.Duration, Default: "30s", Doc: "a request body that makes no progress for this long is cut and answered 408 `request_timeout`"},
	{Key: "STREAM_RECHECK", Kind: config.Duration, Default: "2s", Doc: "how often a request still running re-checks its session or API key"},
	{Key: "MAX_HEADER_BYTES", Kind: config.Int, Default: "32768", Doc: "larger request headers get 431 with a JSON body (at least 1024)"},
	{Key: "SHUTDOWN_GRACE", Kind: config.Duration, Default: "20s", Doc: "in-flight requests finish within this on SIGTERM"},
	{Key: "METRICS_ADDR", Default: "127.0.0.1:9090", Doc: "Prometheus `/metrics` of the gateway, on its own listener (never the public port; `off` disables)"},
	{Key: "PPROF", Kind: config.Bool, Default: "false", Doc: "`true` adds Go's profiles (`/debug/pprof/`) to the metrics listener"},
	{Key: "HANDOFF", Kind: config.Bool, Default: "true", Doc: "send stored files from the object store itself once the files service has authorized them; `false`: the files service streams every byte"},
	{Key: "OBJECT_CACHE_BYTES", Kind: config.Size, Default: "32MiB", Doc: "memory for small handed-off objects sent again from the gateway; `0` turns the cache off"},
	{Key: "OBJECT_CACHE_MAX_OBJECT", Kind: config.Size, Default: "2MiB", Doc: "larger objects are never cached"},
	{Key: "OBJECT_CACHE_TTL", Kind: config.Duration, Default: "5m", Doc: "a cached object is fetched again this long after it was cached"},
	{Key: "MAX_AUTH_BODY", Kind: config.Size, Default: "64KiB", Doc: "request bodies to auth routes; larger: 413 at the gateway"},
	{Key: "MAX_LOGS_BODY", Kind: config.Size, Default: "448KiB", Doc: "request bodies to `/log*` (6 × `LOGS_MAX_BODY` + 64 KiB, room for JSON escapes)"},
	{Key: "MAX_FILES_BODY", Kind: config.Size, Default: "64KiB", Doc: "request bodies to files routes other than uploads"},
	{Key: "MAX_UPLOAD", Kind: config.Size, Default: strconv.Itoa(1<<30 + 64<<10), Doc: "`/upload/file` bodies (`FILES_MAX_UPLOAD` + 64 KiB of multipart room) and each tus `PATCH` of `/uploads/*`"},
	{Key: "MAX_IMAGE_UPLOAD", Kind: config.Size, Default: strconv.Itoa(20<<20 + 64<<10), Doc: "`/upload/image` bodies (`FILES_IMAGE_MAX_BYTES` + 64 KiB)"},
}

// Shared is the shared settings the gateway reads (pkg/config).
var Shared = config.Join(config.Logging, config.NATS, config.ServiceCredential)

// Config is the gateway's configuration.
type Config struct {
	Addr           string
	LogLevel       string
	MetricsAddr    string // "" when off
	Pprof          bool   // Go's profiles at /debug/pprof/ on the metrics listener
	AuthURLs       []string
	FilesURLs      []string
	LogsURLs       []string
	TusURLs        []string // the files service's tus listeners
	PrivateKey     string
	Credential     string
	SessionTTL     time.Duration
	TokenTTL       time.Duration
	AllowedOrigins []string
	PublicURLs     []string // the origins browsers use for the gateway (Host and Origin checks)
	NATSURL        string
	SubjectPrefix  string
	ShutdownGrace  time.Duration
	ReadHeader     time.Duration
	Read           time.Duration // whole request, body included; 0 = off (uploads may be long)
	Write          time.Duration // whole response; 0 = off (downloads may be long)
	BodyIdle       time.Duration // a request body making no progress for this long is cut (408)
	StreamRecheck  time.Duration // a request still running re-checks its session or API key this often
	Idle           time.Duration
	MaxHeaderBytes int
	BodyLimits     map[string]int64
	// The balancer over each service's replicas (package upstream).
	ResolveInterval time.Duration // host names of the *_URL settings resolved again
	ProbeInterval   time.Duration // GET /readyz of every address
	ProbeTimeout    time.Duration
	EjectMax        time.Duration // longest wait before a down address is probed again
	RetryWait       time.Duration // requests wait this long for a replica of a service that has none usable; 0: never
	Handoff         bool          // fetch and send the objects the files service hands off (package handoff)
	ObjectCache     handoff.CacheConfig
}

func loadConfig(getenv func(string) string) (Config, *config.Reader, error) {
	r := config.New(Prefix, getenv, Shared, Settings)
	c := Config{
		Addr:            r.String("ADDR"),
		LogLevel:        r.String("LOG_LEVEL"),
		MetricsAddr:     r.String("METRICS_ADDR"),
		Pprof:           r.Bool("PPROF"),
		AuthURLs:        r.List("AUTH_URL"),
		FilesURLs:       r.List("FILES_URL"),
		LogsURLs:        r.List("LOGS_URL"),
		TusURLs:         r.List("TUS_URL"),
		PrivateKey:      r.String("IDENTITY_PRIVATE_KEY"),
		Credential:      r.String("SERVICE_CREDENTIAL"),
		SessionTTL:      r.Duration("SESSION_CACHE_TTL"),
		TokenTTL:        r.Duration("TOKEN_TTL"),
		AllowedOrigins:  r.List("ALLOWED_ORIGINS"),
		PublicURLs:      strings.Split(r.String("PUBLIC_URL"), ","),
		NATSURL:         r.URLWithLogin("NATS_URL", "NATS_USER", "NATS_PASSWORD"),
		SubjectPrefix:   r.String("NATS_SUBJECT_PREFIX"),
		ShutdownGrace:   r.Duration("SHUTDOWN_GRACE"),
		ReadHeader:      r.Duration("READ_HEADER_TIMEOUT"),
		Read:            r.Duration("READ_TIMEOUT"),
		Write:           r.Duration("WRITE_TIMEOUT"),
		BodyIdle:        r.Duration("BODY_IDLE_TIMEOUT"),
		StreamRecheck:   r.Duration("STREAM_RECHECK"),
		Idle:            r.Duration("IDLE_TIMEOUT"),
		MaxHeaderBytes:  r.Int("MAX_HEADER_BYTES"),
		ResolveInterval: r.Duration("RESOLVE_INTERVAL"),
		ProbeInterval:   r.Duration("PROBE_INTERVAL"),
		ProbeTimeout:    r.Duration("PROBE_TIMEOUT"),
		EjectMax:        r.Duration("EJECT_BACKOFF_MAX"),
		RetryWait:       r.Duration("RETRY_WAIT"),
		Handoff:         r.Bool("HANDOFF"),
		ObjectCache: handoff.CacheConfig{
			Bytes:     r.Int64("OBJECT_CACHE_BYTES"),
			MaxObject: r.Int64("OBJECT_CACHE_MAX_OBJECT"),
			TTL:       r.Duration("OBJECT_CACHE_TTL"),
		},
		BodyLimits: map[string]int64{
			"auth":   r.Int64("MAX_AUTH_BODY"),
			"logs":   r.Int64("MAX_LOGS_BODY"),
			"files":  r.Int64("MAX_FILES_BODY"),
			"upload": r.Int64("MAX_UPLOAD"),
			"image":  r.Int64("MAX_IMAGE_UPLOAD"),
		},
	}
	if err := r.Err(); err != nil {
		return c, r, err
	}
	return c, r, c.check()
}

// check reports the first value that parses but cannot work, and turns
// GATEWAY_METRICS_ADDR=off into no metrics listener.
func (c *Config) check() error {
	if _, err := proxy.ParseOrigins(c.PublicURLs); err != nil {
		return fmt.Errorf("GATEWAY_PUBLIC_URL: %w", err)
	}
	if c.PrivateKey == "" {
		return errors.New("GATEWAY_IDENTITY_PRIVATE_KEY is required")
	}
	if c.Credential == "" {
		return errors.New("GATEWAY_SERVICE_CREDENTIAL (or SERVICE_CREDENTIAL) is required")
	}
	for k, d := range map[string]time.Duration{"RESOLVE_INTERVAL": c.ResolveInterval, "PROBE_INTERVAL": c.ProbeInterval,
		"PROBE_TIMEOUT": c.ProbeTimeout, "EJECT_BACKOFF_MAX": c.EjectMax, "STREAM_RECHECK": c.StreamRecheck} {
		if d <= 0 {
			return fmt.Errorf("GATEWAY_%s must be positive", k)
		}
	}
	if c.ObjectCache.Bytes < 0 || c.ObjectCache.MaxObject < 0 || c.ObjectCache.TTL < 0 {
		return errors.New("GATEWAY_OBJECT_CACHE_BYTES, _MAX_OBJECT and _TTL must not be negative (0 turns the cache off)")
	}
	if c.RetryWait < 0 {
		return errors.New("GATEWAY_RETRY_WAIT must not be negative (0 turns waiting off)")
	}
	if c.MaxHeaderBytes < 1<<10 {
		return errors.New("GATEWAY_MAX_HEADER_BYTES must be at least 1024")
	}
	if c.MetricsAddr == "off" {
		c.MetricsAddr = ""
	} else if c.MetricsAddr == c.Addr && !strings.HasSuffix(c.Addr, ":0") {
		return errors.New("GATEWAY_METRICS_ADDR must differ from GATEWAY_ADDR: metrics are not served on the public port")
	}
	return nil
}
