package upstream

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"time"
)

func (g *Group) resolveLoop() {
	defer g.wg.Done()
	gap := min(g.o.ResolveInterval, 500*time.Millisecond)
	t := time.NewTicker(g.o.ResolveInterval)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-g.ctx.Done():
			return
		case <-t.C:
		case <-g.resolveKick:
			if d := gap - time.Since(last); d > 0 {
				select {
				case <-g.ctx.Done():
					return
				case <-time.After(d):
				}
			}
		}
		g.resolve(g.ctx)
		last = time.Now()
	}
}

// kickResolve asks for a resolution now (rate-limited by resolveLoop).
func (g *Group) kickResolve() {
	select {
	case g.resolveKick <- struct{}{}:
	default:
	}
}

// resolve looks every name up and replaces the endpoint set. A name whose
// lookup fails keeps its last addresses (a DNS hiccup must not empty the
// set); a name that does not exist (or has no address) has none.
func (g *Group) resolve(ctx context.Context) {
	answers := map[*target][]string{}
	for _, t := range g.targets {
		if t.literal {
			answers[t] = []string{t.hostname}
			continue
		}
		lctx, cancel := context.WithTimeout(ctx, lookupTimeout)
		hosts, err := g.o.Lookup(lctx, t.hostname)
		cancel()
		if ctx.Err() != nil {
			return
		}
		var dnsErr *net.DNSError
		switch {
		case err == nil:
		case errors.As(err, &dnsErr) && dnsErr.IsNotFound:
			hosts = nil
		default:
			g.mu.Lock()
			answers[t] = g.resolved[t]
			logIt := !g.failing[t]
			g.failing[t] = true
			g.mu.Unlock()
			if logIt {
				g.o.Log.Warn("upstream name not resolved; keeping its last addresses", "upstream", g.name, "host", t.hostname, "err", err)
			}
			continue
		}
		g.mu.Lock()
		g.failing[t] = false
		g.mu.Unlock()
		var ips []string
		for _, h := range hosts {
			if ip := net.ParseIP(h); ip != nil {
				ips = append(ips, ip.String())
			} else if i := strings.IndexByte(h, '%'); i > 0 && net.ParseIP(h[:i]) != nil {
				ips = append(ips, h) // a zoned IPv6 address
			}
		}
		slices.Sort(ips)
		answers[t] = slices.Compact(ips)
	}
	g.update(answers)
}

// update makes answers the endpoint set, keeping the endpoints (and their
// state) of addresses still present.
func (g *Group) update(answers map[*target][]string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for t, a := range answers {
		g.resolved[t] = a
	}
	next := map[string]*endpoint{}
	added := false
	for _, t := range g.targets {
		for _, ip := range answers[t] {
			addr := net.JoinHostPort(ip, t.port)
			if _, dup := next[addr]; dup {
				continue // the same replica under two names: one share
			}
			e := g.byAddr[addr]
			if e == nil {
				e = &endpoint{g: g, t: t, addr: addr, m: g.o.Metrics.endpoint(g.name, addr)}
				e.st.Store(int32(statePending))
				added = true
				g.o.Log.Info("upstream address added", "upstream", g.name, "address", addr)
			}
			next[addr] = e
		}
	}
	for addr, e := range g.byAddr {
		if next[addr] == nil {
			e.mu.Lock()
			e.removed = true
			e.mu.Unlock()
			g.o.Metrics.forget(g.name, addr)
			g.o.Log.Info("upstream address removed", "upstream", g.name, "address", addr)
		}
	}
	if !added && len(next) == len(g.byAddr) {
		return
	}
	g.byAddr = next
	list := make([]*endpoint, 0, len(next))
	for _, e := range next {
		list = append(list, e)
	}
	slices.SortFunc(list, func(a, b *endpoint) int { return strings.Compare(a.addr, b.addr) })
	g.eps.Store(&list)
	if added {
		g.kickProbe()
		g.usableAgain()
		g.broadcast()
	}
}
