package app

import (
	"errors"
	"fmt"
	"image"
	"strconv"
	"strings"
	"time"

	"github.com/acme/platform/pkg/config"
	"github.com/acme/platform/services/files/internal/s3store"
)

// Prefix is the prefix of the files service's own settings.
const Prefix = "FILES"

// Settings is every setting the files service reads besides the shared
// ones, each defined here once; LoadConfig reads through it and
// docs/configuration.md is generated from it.
var Settings = config.Table{
	{Key: "ADDR", Default: "127.0.0.1:8082", Doc: "listen address"},
	{Key: "TUS_ADDR", Default: "127.0.0.1:8086", Doc: "listen address of the tus resumable uploads; the gateway's `GATEWAY_TUS_URL` points at it"},
	{Key: "TUS_EXPIRY", Kind: config.Duration, Default: "24h", Doc: "an upload not finished this long after its creation expires (410) and the sweeper removes its parts"},
	{Key: "PUBLIC_BASE_URL", Default: "http://127.0.0.1:8080", Doc: "public (gateway) base of `downloadUrl` and image `url`"},
	{Key: "MAX_UPLOAD", Kind: config.Size, Default: "1GiB", Doc: "largest file → 413"},
	{Key: "MAX_META", Kind: config.Int, Default: "4096", Doc: "bytes of `meta` → 400"},
	{Key: "READ_ALL", Kind: config.Bool, Default: "false", Doc: "every signed-in user may read every file"},
	{Key: "IMAGE_MAX_BYTES", Kind: config.Size, Default: "20MiB", Doc: "largest image upload → 413"},
	{Key: "IMAGE_MAX_PIXELS", Kind: config.Size, Default: "40000000", Doc: "width × height allowed in an image header → 422"},
	{Key: "IMAGE_MAX_SIDE", Kind: config.Int, Default: "2048", Doc: "longest side of a stored image"},
	{Key: "IMAGE_QUALITY", Kind: config.Int, Default: "82", Doc: "JPEG quality 1–100"},
	{Key: "IMAGE_CONCURRENCY", Kind: config.Int, Default: "2", Doc: "images decoded and re-encoded at once (CPU); memory is bounded by the two settings below"},
	{Key: "IMAGE_MAX_MEMORY", Kind: config.Size, Default: "256MiB", Doc: "bytes one image may take to decode, resize and re-encode, estimated from its header → 422 `image_too_much_memory`; at least 1MiB"},
	{Key: "IMAGE_MEMORY", Kind: config.Size, Default: "320MiB", Doc: "bytes all images being processed may take together (a weighted semaphore; past it 503 `busy` after `FILES_IMAGE_WAIT`); at least `FILES_IMAGE_MAX_MEMORY`"},
	{Key: "IMAGE_WAIT", Kind: config.Duration, Default: "30s", Doc: "wait for a re-encode slot and for image memory before 503 `busy`"},
	{Key: "IMAGE_MAX_SCANS", Kind: config.Int, Default: "16", Doc: "work one JPEG may take to decode, in walks over its blocks: its scans, each weighed by the share of the image's blocks it covers, counted from the markers before decoding → 422 `image_too_complex`; encoders write at most 6 (docs/files.md)"},
	{Key: "IMAGE_DECODE_TIMEOUT", Kind: config.Duration, Default: "20s", Doc: "deadline of one image's decode, resize and re-encode once it holds its slot → 422 `image_timeout`; the slot and memory are given back at once; `0` no deadline"},
	{Key: "IMAGE_VARIANTS", Kind: config.Int, Default: "20", Doc: "variants (`GET /images/{id}?w=&h=…`) stored of one image at most; more → 400 `too_many_variants`; `0` turns variants off"},
	{Key: "IMAGE_VARIANT_MAX_SIDE", Kind: config.Int, Default: "1024", Doc: "longest side of a variant (besides the image's own sides) → 400 `invalid_parameter`"},
	{Key: "IMAGE_VARIANT_SIZES", Default: "", Doc: "when set, the only variant sizes allowed, as asked: `WxH` separated by commas, `0` for a side left out (`100x100,0x300`); empty: any size within the limits"},
	{Key: "S3_PART_SIZE", Kind: config.Size, Default: "8MiB", Doc: "multipart part size of streamed uploads (at least 5MiB)"},
	{Key: "S3_UPLOAD_THREADS", Kind: config.Int, Default: "2", Doc: "parts uploaded in parallel per upload"},
	{Key: "QUOTA", Kind: config.Size, Default: "10GiB", Doc: "bytes each user may store unless an administrator sets their own; `0` no quota"},
	{Key: "ERASE_ACK_WAIT", Kind: config.Duration, Default: "30s", Doc: "redelivery delay of an unfinished erasure of a deleted user's files (at least 1s)"},
	{Key: "ERASE_MAX_DELIVER", Kind: config.Int, Default: "50", Doc: "deliveries of one erasure, at most (at least 2)"},
	{Key: "READ_IDLE_TIMEOUT", Kind: config.Duration, Default: "60s", Doc: "abort an upload whose body stalls this long"},
	{Key: "SWEEP_INTERVAL", Kind: config.Duration, Default: "15m", Doc: "orphan sweep period; `0` disables"},
	{Key: "SWEEP_AGE", Kind: config.Duration, Default: "1h", Doc: "only objects older than this may be swept"},
	{Key: "SHUTDOWN_GRACE", Kind: config.Duration, Default: "20s", Doc: "graceful shutdown deadline"},
	{Key: "RECORD_CACHE_TTL", Kind: config.Duration, Default: "5m", Doc: "file records by id kept in memory per replica (downloads, images, retrieves); `0` turns the cache off"},
	{Key: "RECORD_CACHE_SIZE", Kind: config.Int, Default: "10000", Doc: "records held (about 4 MiB)"},
	{Key: "OWNER_CACHE_TTL", Kind: config.Duration, Default: "1m", Doc: "owners' `GET /files` pages and usage kept in memory per replica; `0` turns the cache off"},
	{Key: "OWNER_CACHE_SIZE", Kind: config.Int, Default: "20000", Doc: "every record of a cached page plus one per page and per usage (about 10 MiB)"},
	{Key: "HANDOFF_TTL", Kind: config.Duration, Default: "15m", Doc: "life of the presigned GETs handed to the gateway, which then sends the bytes itself; between `1m` and `168h`, or `0`: this service streams every byte"},
}

// Shared is the shared settings the files service reads (pkg/config).
var Shared = config.Join(config.Logging, config.Mongo, config.NATS, config.Identity, config.S3)

// Config is the service's configuration.
type Config struct {
	Addr             string
	LogLevel         string
	TusAddr          string
	TusExpiry        time.Duration
	MongoURL         string
	MongoDB          string
	S3               s3store.Options
	IdentityKey      string
	NATSURL          string
	SubjectPrefix    string
	PublicBaseURL    string
	MaxUpload        int64
	MaxMeta          int
	ReadAll          bool
	ImageMaxBytes    int64
	ImageMaxPixels   int64
	ImageMaxSide     int
	ImageQuality     int
	ImageConcurrency int
	ImageWait        time.Duration
	ImageMaxScans    int           // a JPEG's scans, in walks over its blocks
	ImageTimeout     time.Duration // one image's decode and re-encode; 0: none
	ImageMaxMemory   int64         // bytes one image may take to decode and re-encode
	ImageMemory      int64         // bytes all images being processed may take together
	ImageVariants    int           // variants stored of one image; 0: off
	VariantMaxSide   int           // longest side of a variant
	VariantSizes     []image.Point // allowed variant boxes; empty: any
	Quota            int64
	EraseAckWait     time.Duration
	EraseMaxDeliver  int
	ReadIdle         time.Duration
	SweepInterval    time.Duration
	SweepAge         time.Duration
	ShutdownGrace    time.Duration
	RecordCacheTTL   time.Duration // 0 disables the record cache
	RecordCacheSize  int
	OwnerCacheTTL    time.Duration // 0 disables the owner cache (listings and usage)
	OwnerCacheSize   int           // records, pages and usages held
	HandoffTTL       time.Duration // presigned GETs for the gateway; 0: bytes always streamed here
}

// LoadConfig reads FILES_* and the shared settings.
func LoadConfig(getenv func(string) string) (Config, *config.Reader, error) {
	r := config.New(Prefix, getenv, Shared, Settings)
	c := Config{
		Addr:      r.String("ADDR"),
		LogLevel:  r.String("LOG_LEVEL"),
		TusAddr:   r.String("TUS_ADDR"),
		TusExpiry: r.Duration("TUS_EXPIRY"),
		MongoURL:  r.MongoURL(),
		MongoDB:   r.String("MONGO_DB"),
		S3: s3store.Options{
			Endpoint:      r.String("S3_ENDPOINT"),
			AccessKey:     r.String("S3_ACCESS_KEY"),
			SecretKey:     r.String("S3_SECRET_KEY"),
			Bucket:        r.String("S3_BUCKET"),
			UseTLS:        r.Bool("S3_USE_TLS"),
			PartSize:      uint64(r.Int64("S3_PART_SIZE")),
			UploadThreads: uint(r.Int("S3_UPLOAD_THREADS")),
		},
		IdentityKey:      r.String("IDENTITY_PUBLIC_KEY"),
		NATSURL:          r.URLWithLogin("NATS_URL", "NATS_USER", "NATS_PASSWORD"),
		SubjectPrefix:    r.String("NATS_SUBJECT_PREFIX"),
		PublicBaseURL:    r.String("PUBLIC_BASE_URL"),
		MaxUpload:        r.Int64("MAX_UPLOAD"),
		MaxMeta:          r.Int("MAX_META"),
		ReadAll:          r.Bool("READ_ALL"),
		ImageMaxBytes:    r.Int64("IMAGE_MAX_BYTES"),
		ImageMaxPixels:   r.Int64("IMAGE_MAX_PIXELS"),
		ImageMaxSide:     r.Int("IMAGE_MAX_SIDE"),
		ImageQuality:     r.Int("IMAGE_QUALITY"),
		ImageConcurrency: r.Int("IMAGE_CONCURRENCY"),
		ImageWait:        r.Duration("IMAGE_WAIT"),
		ImageMaxScans:    r.Int("IMAGE_MAX_SCANS"),
		ImageTimeout:     r.Duration("IMAGE_DECODE_TIMEOUT"),
		ImageMaxMemory:   r.Int64("IMAGE_MAX_MEMORY"),
		ImageMemory:      r.Int64("IMAGE_MEMORY"),
		ImageVariants:    r.Int("IMAGE_VARIANTS"),
		VariantMaxSide:   r.Int("IMAGE_VARIANT_MAX_SIDE"),
		Quota:            r.Int64("QUOTA"),
		EraseAckWait:     r.Duration("ERASE_ACK_WAIT"),
		EraseMaxDeliver:  r.Int("ERASE_MAX_DELIVER"),
		ReadIdle:         r.Duration("READ_IDLE_TIMEOUT"),
		SweepInterval:    r.Duration("SWEEP_INTERVAL"),
		SweepAge:         r.Duration("SWEEP_AGE"),
		ShutdownGrace:    r.Duration("SHUTDOWN_GRACE"),
		RecordCacheTTL:   r.Duration("RECORD_CACHE_TTL"),
		RecordCacheSize:  r.Int("RECORD_CACHE_SIZE"),
		OwnerCacheTTL:    r.Duration("OWNER_CACHE_TTL"),
		OwnerCacheSize:   r.Int("OWNER_CACHE_SIZE"),
		HandoffTTL:       r.Duration("HANDOFF_TTL"),
	}
	err := r.Err()
	sizes, serr := parseSizes(r.String("IMAGE_VARIANT_SIZES"))
	c.VariantSizes = sizes
	err = errors.Join(err, serr)
	if problems := c.check(); len(problems) > 0 {
		err = errors.Join(err, fmt.Errorf("configuration: %v", problems))
	}
	return c, r, err
}

// check returns the problems of values that parse but cannot work.
func (c Config) check() []string {
	var problems []string
	add := func(bad bool, msg string) {
		if bad {
			problems = append(problems, msg)
		}
	}
	add(c.IdentityKey == "", "IDENTITY_PUBLIC_KEY is required")
	add(c.EraseAckWait < time.Second || c.EraseMaxDeliver < 2, "FILES_ERASE_ACK_WAIT must be at least 1s and FILES_ERASE_MAX_DELIVER at least 2")
	add(c.TusExpiry < time.Second, "FILES_TUS_EXPIRY must be at least 1s")
	add(c.Quota < 0, "FILES_QUOTA must not be negative (0: no quota)")
	add(c.MaxUpload <= 0 || c.ImageMaxBytes <= 0 || c.MaxMeta < 0, "FILES_MAX_UPLOAD and FILES_IMAGE_MAX_BYTES must be positive, FILES_MAX_META not negative")
	add(c.ImageMaxPixels <= 0 || c.ImageMaxSide <= 0 || c.ImageQuality < 1 || c.ImageQuality > 100 || c.ImageConcurrency < 1,
		"FILES_IMAGE_MAX_PIXELS, FILES_IMAGE_MAX_SIDE, FILES_IMAGE_CONCURRENCY must be positive, FILES_IMAGE_QUALITY 1..100")
	add(c.ImageMaxScans < 1 || c.ImageTimeout < 0, "FILES_IMAGE_MAX_SCANS must be positive and FILES_IMAGE_DECODE_TIMEOUT not negative (0: none)")
	add(c.ImageMaxMemory < 1<<20 || c.ImageMemory < c.ImageMaxMemory, "FILES_IMAGE_MAX_MEMORY must be at least 1MiB and FILES_IMAGE_MEMORY at least FILES_IMAGE_MAX_MEMORY")
	add(c.ImageVariants < 0 || c.VariantMaxSide < 1, "FILES_IMAGE_VARIANTS must not be negative (0: off) and FILES_IMAGE_VARIANT_MAX_SIDE must be positive")
	add(c.S3.PartSize < 5<<20 || c.S3.UploadThreads < 1, "FILES_S3_PART_SIZE must be at least 5MiB and FILES_S3_UPLOAD_THREADS at least 1")
	add(c.RecordCacheTTL < 0 || c.RecordCacheSize < 1, "FILES_RECORD_CACHE_TTL must not be negative (0: off) and FILES_RECORD_CACHE_SIZE at least 1")
	add(c.OwnerCacheTTL < 0 || c.OwnerCacheSize < 1, "FILES_OWNER_CACHE_TTL must not be negative (0: off) and FILES_OWNER_CACHE_SIZE at least 1")
	add(c.HandoffTTL != 0 && (c.HandoffTTL < time.Minute || c.HandoffTTL > 7*24*time.Hour), "FILES_HANDOFF_TTL must be 0 (off) or between 1m and 168h (S3's longest presigned URL)")
	return problems
}

// parseSizes reads FILES_IMAGE_VARIANT_SIZES: "WxH" boxes separated by
// commas, 0 for a side left out (not both).
func parseSizes(v string) ([]image.Point, error) {
	var out []image.Point
	for _, item := range strings.Split(v, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		ws, hs, ok := strings.Cut(item, "x")
		w, werr := strconv.Atoi(ws)
		h, herr := strconv.Atoi(hs)
		if !ok || werr != nil || herr != nil || w < 0 || h < 0 || w == 0 && h == 0 {
			return nil, fmt.Errorf("FILES_IMAGE_VARIANT_SIZES: %q is not WxH (whole numbers, 0 for a side left out, not both)", item)
		}
		out = append(out, image.Pt(w, h))
	}
	return out, nil
}
