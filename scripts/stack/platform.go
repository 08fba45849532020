package stack

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
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
	// MongoUser and MongoPassword, if set, are every service's MongoDB
	// login (MONGO_USER, MONGO_PASSWORD, as compose.yaml hands them);
	// MongoURL then names the authSource.
	MongoUser, MongoPassword string
	// NATSPasswords, if set, log each service in to NATS as the user named
	// after it (auth, files, logs, gateway: deploy/nats.conf) with the
	// password under that name (NATS_USER, NATS_PASSWORD, as compose.yaml
	// hands them). Every service launched must have one.
	NATSPasswords map[string]string
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
	GatewayAddr string            // the first gateway's address, e.g. 127.0.0.1:8080
	Env         map[string]string // extra variables for every service
	// ServiceEnv are extra variables for one service only, by service name
	// (a secret only that service needs, e.g. auth's AUTH_MFA_KEY).
	ServiceEnv map[string]map[string]string
	Out        io.Writer
	// Gateways is how many gateway processes to start (0 means 1) and
	// Replicas how many processes of each of auth, files and logs (0 means
	// 1), each on its own port. Every gateway gets the comma-separated list
	// of every replica of each service, as GATEWAY_AUTH_URL etc. The
	// replicas of one service start at the same time (as `docker compose up
	// --scale` starts them), so their start-up (the administrator and App
	// records seeded on an empty database) runs concurrently.
	Gateways, Replicas int
}

// Platform is the running services.
type Platform struct {
	// Procs holds the first process of each service (the only one with one
	// replica each), by service name.
	Procs map[string]*Proc
	// Replicas holds every process of each service, gateways included, in
	// order; with more than one, their output lines are prefixed
	// "auth-1", "auth-2", ....
	Replicas   map[string][]*Proc
	GatewayURL string // the first gateway
	// GatewayURLs are every gateway's base URL, in order.
	GatewayURLs []string
	// TusURLs are the files replicas' tus listeners (FILES_TUS_ADDR), in
	// the order of Replicas["files"].
	TusURLs []string
	// MetricsURLs are the /metrics endpoints by service name (the gateway's
	// on its own listener, the services' on their ports), of the first
	// process of each.
	MetricsURLs map[string]string
	order       []*Proc
	mu          sync.Mutex
	starts      map[*Proc]started // how each process was started, for Restart
	out         io.Writer
	stopping    bool // Stop was called: Supervise restarts nothing more
	// released is closed by Release; while it is open (after Hold), the
	// processes stay stopped.
	released chan struct{}
}

type started struct {
	name, label, bin string
	env              []string
	index            int
}

// Launch starts auth, files, logs, then the gateways, each process on its
// own port.
func Launch(o Options, s Servers, sec Secrets) (*Platform, error) {
	gateways, replicas := max(o.Gateways, 1), max(o.Replicas, 1)
	p := &Platform{Procs: map[string]*Proc{}, Replicas: map[string][]*Proc{}, starts: map[*Proc]started{}, out: o.Out}
	count := map[string]int{"auth": replicas, "files": replicas, "logs": replicas, "gateway": gateways}
	addrs := map[string][]string{}
	for _, name := range Services {
		for i := range count[name] {
			if name == "gateway" && i == 0 && o.GatewayAddr != "" && !strings.HasSuffix(o.GatewayAddr, ":0") {
				addrs[name] = append(addrs[name], o.GatewayAddr)
				continue
			}
			a, err := embedded.FreeAddr()
			if err != nil {
				return nil, err
			}
			addrs[name] = append(addrs[name], a)
		}
	}
	// Each files replica serves tus uploads on a listener of its own.
	for range addrs["files"] {
		a, err := embedded.FreeAddr()
		if err != nil {
			return nil, err
		}
		addrs["tus"] = append(addrs["tus"], a)
		p.TusURLs = append(p.TusURLs, "http://"+a)
	}
	for _, a := range addrs["gateway"] {
		p.GatewayURLs = append(p.GatewayURLs, "http://"+a)
	}
	p.GatewayURL = p.GatewayURLs[0]
	var metricsAddrs []string
	for i := range gateways {
		if a := o.Env["GATEWAY_METRICS_ADDR"]; a != "" && i == 0 {
			metricsAddrs = append(metricsAddrs, a)
			continue
		}
		a, err := embedded.FreeAddr() // not 9090: several platforms may run at once (tests)
		if err != nil {
			return nil, err
		}
		metricsAddrs = append(metricsAddrs, a)
	}
	p.MetricsURLs = map[string]string{"gateway": "http://" + metricsAddrs[0] + "/metrics"}
	for _, name := range []string{"auth", "files", "logs"} {
		p.MetricsURLs[name] = "http://" + addrs[name][0] + "/metrics"
	}
	common := []string{
		"MONGO_URL=" + s.MongoURL, "MONGO_DB=" + s.MongoDB,
		"NATS_URL=" + s.NATSURL, "NATS_SUBJECT_PREFIX=" + s.SubjectPrefix,
		"IDENTITY_PUBLIC_KEY=" + sec.IdentityPublicPEM,
		"SERVICE_CREDENTIAL=" + sec.ServiceCredential,
	}
	if s.MongoUser != "" {
		common = append(common, "MONGO_USER="+s.MongoUser, "MONGO_PASSWORD="+s.MongoPassword)
	}
	if s.NATSPasswords != nil {
		for name := range o.Bins {
			if s.NATSPasswords[name] == "" {
				return nil, fmt.Errorf("stack: no NATS password for %s", name)
			}
		}
	}
	for k, v := range o.Env {
		if k == "GATEWAY_METRICS_ADDR" {
			continue // per gateway, below
		}
		common = append(common, k+"="+v)
	}
	urls := func(name string) string {
		var l []string
		for _, a := range addrs[name] {
			l = append(l, "http://"+a)
		}
		return strings.Join(l, ",")
	}
	base := func(name string, i int) []string {
		a := addrs[name][i]
		switch name {
		case "auth":
			return []string{"AUTH_ADDR=" + a, "ADMIN_EMAIL=" + sec.AdminEmail, "ADMIN_PASSWORD=" + sec.AdminPassword,
				"GODEBUG=" + AuthGODEBUG(o.Env["GODEBUG"])}
		case "files":
			return []string{"FILES_ADDR=" + a, "FILES_TUS_ADDR=" + addrs["tus"][i], "S3_ENDPOINT=" + s.S3Endpoint, "S3_ACCESS_KEY=" + s.S3Access,
				"S3_SECRET_KEY=" + s.S3Secret, "S3_BUCKET=" + s.S3Bucket, "FILES_PUBLIC_BASE_URL=" + p.GatewayURL}
		case "logs":
			return []string{"LOGS_ADDR=" + a}
		default:
			return []string{"GATEWAY_ADDR=" + a, "GATEWAY_IDENTITY_PRIVATE_KEY=" + sec.IdentityPrivatePEM,
				"GATEWAY_AUTH_URL=" + urls("auth"), "GATEWAY_FILES_URL=" + urls("files"),
				"GATEWAY_LOGS_URL=" + urls("logs"), "GATEWAY_TUS_URL=" + urls("tus"),
				"GATEWAY_METRICS_ADDR=" + metricsAddrs[i]}
		}
	}
	// Each process: its own settings, its NATS user, its own extras.
	env := func(name string, i int) []string {
		e := base(name, i)
		if pw := s.NATSPasswords[name]; pw != "" {
			e = append(e, "NATS_USER="+name, "NATS_PASSWORD="+pw)
		}
		for k, v := range o.ServiceEnv[name] {
			e = append(e, k+"="+v)
		}
		return e
	}
	for _, name := range Services {
		bin, ok := o.Bins[name]
		if !ok {
			continue
		}
		n := count[name]
		procs := make([]*Proc, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			label := name
			if n > 1 {
				label = fmt.Sprintf("%s-%d", name, i+1)
			}
			st := started{name: name, label: label, bin: bin, index: i,
				env: append(append([]string{}, common...), env(name, i)...)}
			wg.Go(func() {
				procs[i], errs[i] = Start(label, bin, addrs[name][i], st.env, o.Out)
				if errs[i] == nil {
					p.mu.Lock()
					p.starts[procs[i]] = st
					p.mu.Unlock()
				}
			})
		}
		wg.Wait()
		for i := range n {
			if procs[i] != nil {
				p.Replicas[name] = append(p.Replicas[name], procs[i])
				p.order = append(p.order, procs[i])
			}
		}
		if err := errors.Join(errs...); err != nil {
			p.Stop(5 * time.Second)
			return nil, err
		}
		p.Procs[name] = procs[0]
	}
	return p, nil
}

// Restart starts a new process in place of proc (one of the platform's,
// running or not): same binary, address and environment. The new process
// takes proc's place in Procs, Replicas and the stop order.
func (p *Platform) Restart(proc *Proc) (*Proc, error) {
	p.mu.Lock()
	st, ok := p.starts[proc]
	p.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("%s: not started by this platform", proc.Name)
	}
	np, err := Start(st.label, st.bin, proc.Addr, st.env, p.out)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.starts[np] = st
	delete(p.starts, proc)
	p.Replicas[st.name][st.index] = np
	if st.index == 0 {
		p.Procs[st.name] = np
	}
	for i, q := range p.order {
		if q == proc {
			p.order[i] = np
		}
	}
	return np, nil
}

// Stop stops the gateways first, then the services.
func (p *Platform) Stop(grace time.Duration) {
	p.mu.Lock()
	p.stopping = true
	order := append([]*Proc{}, p.order...)
	p.mu.Unlock()
	for i := len(order) - 1; i >= 0; i-- {
		order[i].Stop(grace)
	}
}

// AuthGODEBUG is auth's GODEBUG: madvdontneed=0, then the caller's settings
// (which win: later entries override). Every argon2id hash allocates its
// memory (19 MiB by default) afresh, and with the default MADV_DONTNEED the
// runtime's scavenger keeps handing some of it back to the kernel, so the
// next hashes fault it in again page by page: about a hundred page faults
// per sign-in, each with a TLB shootdown on the other cores. MADV_FREE
// leaves the pages mapped until the kernel needs them (docs/auth.md,
// "Memory"). compose.yaml sets the same for the auth container.
func AuthGODEBUG(extra string) string {
	if extra == "" {
		return "madvdontneed=0"
	}
	return "madvdontneed=0," + extra
}
