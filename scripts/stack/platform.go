package stack

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/acme/platform/pkg/embedded"
	"github.com/acme/platform/pkg/identity"
)

// Servers are the dependencies the services run against.
type Servers struct {
	MongoURL, MongoDB      string
	NATSURL, SubjectPrefix string
	S3Endpoint, S3Access   string
	S3Secret, S3Bucket     string
}

// Secrets shared by the services of one platform.
type Secrets struct {
	IdentityPrivatePEM string
	IdentityPublicPEM  string
	ServiceCredential  string
	AdminEmail         string
	AdminPassword      string
}

// NewSecrets generates a fresh set.
func NewSecrets(adminEmail, adminPassword string) (Secrets, error) {
	pub, priv, err := identity.GenerateKey()
	if err != nil {
		return Secrets{}, err
	}
	privPEM, err := identity.EncodePrivateKey(priv)
	if err != nil {
		return Secrets{}, err
	}
	pubPEM, err := identity.EncodePublicKey(pub)
	if err != nil {
		return Secrets{}, err
	}
	if adminPassword == "" {
		adminPassword = Secret(15)
	}
	return Secrets{privPEM, pubPEM, Secret(32), adminEmail, adminPassword}, nil
}

// Options for Launch.
type Options struct {
	Bins        map[string]string
	GatewayAddr string            // e.g. 127.0.0.1:8080
	Env         map[string]string // extra variables for every service
	Out         io.Writer
}

// Platform is the four running services.
type Platform struct {
	Procs      map[string]*Proc
	GatewayURL string
	// MetricsURLs are the /metrics endpoints by service name (the gateway's
	// on its own listener, the services' on their ports).
	MetricsURLs map[string]string
	order       []*Proc
	envs        map[string][]string
	out         io.Writer
}

// Launch starts auth, files, logs, then the gateway, each on its own port.
func Launch(o Options, s Servers, sec Secrets) (*Platform, error) {
	p := &Platform{Procs: map[string]*Proc{}, envs: map[string][]string{}, out: o.Out}
	addrs := map[string]string{}
	for _, name := range Services {
		if name == "gateway" && o.GatewayAddr != "" && !strings.HasSuffix(o.GatewayAddr, ":0") {
			addrs[name] = o.GatewayAddr
			continue
		}
		a, err := embedded.FreeAddr()
		if err != nil {
			return nil, err
		}
		addrs[name] = a
	}
	p.GatewayURL = "http://" + addrs["gateway"]
	metricsAddr := o.Env["GATEWAY_METRICS_ADDR"]
	if metricsAddr == "" {
		a, err := embedded.FreeAddr() // not 9090: several platforms may run at once (tests)
		if err != nil {
			return nil, err
		}
		metricsAddr = a
	}
	p.MetricsURLs = map[string]string{"gateway": "http://" + metricsAddr + "/metrics"}
	for _, name := range []string{"auth", "files", "logs"} {
		p.MetricsURLs[name] = "http://" + addrs[name] + "/metrics"
	}
	common := []string{
		"MONGO_URL=" + s.MongoURL, "MONGO_DB=" + s.MongoDB,
		"NATS_URL=" + s.NATSURL, "NATS_SUBJECT_PREFIX=" + s.SubjectPrefix,
		"IDENTITY_PUBLIC_KEY=" + sec.IdentityPublicPEM,
		"SERVICE_CREDENTIAL=" + sec.ServiceCredential,
	}
	for k, v := range o.Env {
		common = append(common, k+"="+v)
	}
	env := map[string][]string{
		"auth": {"AUTH_ADDR=" + addrs["auth"], "ADMIN_EMAIL=" + sec.AdminEmail, "ADMIN_PASSWORD=" + sec.AdminPassword},
		"files": {"FILES_ADDR=" + addrs["files"], "S3_ENDPOINT=" + s.S3Endpoint, "S3_ACCESS_KEY=" + s.S3Access,
			"S3_SECRET_KEY=" + s.S3Secret, "S3_BUCKET=" + s.S3Bucket, "FILES_PUBLIC_BASE_URL=" + p.GatewayURL},
		"logs": {"LOGS_ADDR=" + addrs["logs"]},
		"gateway": {"GATEWAY_ADDR=" + addrs["gateway"], "GATEWAY_IDENTITY_PRIVATE_KEY=" + sec.IdentityPrivatePEM,
			"GATEWAY_AUTH_URL=http://" + addrs["auth"], "GATEWAY_FILES_URL=http://" + addrs["files"],
			"GATEWAY_LOGS_URL=http://" + addrs["logs"], "GATEWAY_METRICS_ADDR=" + metricsAddr},
	}
	for _, name := range Services {
		bin, ok := o.Bins[name]
		if !ok {
			continue
		}
		p.envs[name] = append(append([]string{}, common...), env[name]...)
		proc, err := Start(name, bin, addrs[name], p.envs[name], o.Out)
		if err != nil {
			p.Stop(5 * time.Second)
			return nil, err
		}
		p.Procs[name] = proc
		p.order = append(p.order, proc)
	}
	return p, nil
}

// Stop stops the gateway first, then the services.
func (p *Platform) Stop(grace time.Duration) {
	for i := len(p.order) - 1; i >= 0; i-- {
		p.order[i].Stop(grace)
	}
}

// Restart starts service name again from bins, on the same address with the
// same environment, in place of its process (which must have ended: Stop or
// Kill it first), and waits until it is healthy.
func (p *Platform) Restart(name string, bins map[string]string) (*Proc, error) {
	old, ok := p.Procs[name]
	if !ok {
		return nil, fmt.Errorf("restart: no %s process", name)
	}
	select {
	case <-old.Exited():
	default:
		return nil, fmt.Errorf("restart: %s is still running", name)
	}
	proc, err := Start(name, bins[name], old.Addr, p.envs[name], p.out)
	if err != nil {
		return nil, err
	}
	p.Procs[name] = proc
	for i, q := range p.order {
		if q == old {
			p.order[i] = proc
		}
	}
	return proc, nil
}
