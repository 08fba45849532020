// Command testop runs the test OpenID Provider of package idptest as a
// process, for end-to-end tests of a whole platform (scripts/e2e): one
// client, one user, the issuer printed on the first line of stdout, until
// it is killed.
//
//	testop -redirect http://127.0.0.1:8080/signin/oidc/corp/callback \
//	    -client platform -secret s3cret -user ada -password pw -email ada@example.com
package main

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"testing"

	"github.com/acme/platform/services/auth/internal/idp/idptest"
)

func main() {
	var c idptest.Client
	var u idptest.User
	redirect := flag.String("redirect", "", "the client's redirect URI")
	flag.StringVar(&c.ID, "client", "platform", "client id")
	flag.StringVar(&c.Secret, "secret", "", "client secret")
	flag.StringVar(&u.Username, "user", "ada", "the user's login name")
	flag.StringVar(&u.Password, "password", "", "the user's password")
	flag.StringVar(&u.Email, "email", "ada@example.com", "the user's verified e-mail address")
	flag.StringVar(&u.FirstName, "name", "Ada", "the user's first name")
	flag.Parse()
	if *redirect == "" || c.Secret == "" || u.Password == "" {
		fmt.Fprintln(os.Stderr, "testop: -redirect, -secret and -password are required")
		os.Exit(2)
	}
	c.RedirectURIs = []string{*redirect}
	u.ID, u.EmailVerified, u.LastName = "sub-"+u.Username, true, "Test"
	// The example server logs every request at INFO: warnings only.
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	tb := &processTB{}
	op := idptest.StartOP(tb, []idptest.Client{c}, []idptest.User{u})
	fmt.Println(op.Issuer)
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	<-stop
	tb.cleanup()
}

// processTB is the testing.TB StartOP needs, for a process: a failure ends
// it.
type processTB struct {
	testing.TB
	cleanups []func()
}

func (p *processTB) Helper()                   {}
func (p *processTB) Cleanup(f func())          { p.cleanups = append(p.cleanups, f) }
func (p *processTB) Fatal(args ...any)         { fmt.Fprintln(os.Stderr, args...); os.Exit(1) }
func (p *processTB) Fatalf(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...); os.Exit(1) }
func (p *processTB) cleanup() {
	for i := len(p.cleanups) - 1; i >= 0; i-- {
		p.cleanups[i]()
	}
}
