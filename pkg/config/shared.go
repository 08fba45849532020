package config

// The settings several processes read, each defined here once. They are
// Shared: read as PREFIX_KEY, then KEY, so a deployment sets them once for
// every service and may still override one service's.

// Logging is read by every service.
var Logging = Table{
	{Key: "LOG_LEVEL", Default: "info", Shared: true,
		Doc: "lowest level logged: debug, info, warn or error (debug adds the routine requests, such as health probes)"},
}

// Mongo is read by the services that keep data in MongoDB (auth, files, logs).
var Mongo = Table{
	{Key: "MONGO_URL", Default: "mongodb://127.0.0.1:27017", Shared: true, File: true,
		Doc: "MongoDB (or MongoDB-wire) server; a connection string may list several hosts"},
	{Key: "MONGO_USER", Shared: true, File: true,
		Doc: "MongoDB login, added to `MONGO_URL`; empty: the URL as configured"},
	{Key: "MONGO_PASSWORD", Shared: true, File: true, Secret: true,
		Doc: "its password (needs `MONGO_USER`)"},
	{Key: "MONGO_DB", Default: "acme", Shared: true,
		Doc: "database name"},
}

// NATS is read by every service.
var NATS = Table{
	{Key: "NATS_URL", Default: "nats://127.0.0.1:4222", Shared: true, File: true,
		Doc: "NATS server, or a comma-separated list of a cluster's servers"},
	{Key: "NATS_USER", Shared: true, File: true,
		Doc: "NATS login, added to every server of `NATS_URL` (the compose deployment gives each service its own user)"},
	{Key: "NATS_PASSWORD", Shared: true, File: true, Secret: true,
		Doc: "its password (needs `NATS_USER`)"},
	{Key: "NATS_SUBJECT_PREFIX", Default: "acme", Shared: true,
		Doc: "prefix of every subject; stream names are its upper case + `_LOGS` etc."},
}

// Identity is read by the services behind the gateway (auth, files, logs).
var Identity = Table{
	{Key: "IDENTITY_PUBLIC_KEY", Shared: true, File: true, DefaultDoc: "required",
		Doc: "the gateway's Ed25519 public key (PKIX PEM or base64), to verify identity tokens"},
}

// ServiceCredential is the secret the gateway presents to auth and that
// OpenTelemetry senders present to logs.
var ServiceCredential = Table{
	{Key: "SERVICE_CREDENTIAL", Shared: true, File: true, Secret: true,
		Doc: "shared secret between the gateway and the services (auth's `GET /ms/me`, logs' `POST /v1/logs`)"},
}

// S3 is read by the files service and the deploy/s3setup job.
var S3 = Table{
	{Key: "S3_ENDPOINT", Default: "127.0.0.1:9000", Shared: true,
		Doc: "the object store's host:port, without a scheme"},
	{Key: "S3_USE_TLS", Kind: Bool, Default: "false", Shared: true,
		Doc: "`true` for https"},
	{Key: "S3_BUCKET", Default: "acme-files", Shared: true,
		Doc: "the files service's bucket"},
	{Key: "S3_ACCESS_KEY", Shared: true, File: true,
		Doc: "the files service's access key"},
	{Key: "S3_SECRET_KEY", Shared: true, File: true, Secret: true,
		Doc: "its secret key"},
}

// Shared is every table above, in the order docs/configuration.md lists
// them.
var Shared = Join(Logging, Mongo, NATS, Identity, ServiceCredential, S3)
