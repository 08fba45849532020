package embedded

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"
)

// An address another server holds is refused at once, not mistaken for
// this Mailpit; with a UI login, readiness is this Mailpit's API refusing
// a request without the login and answering one with it.
func TestStartMailpitOwnAddressAndLogin(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs Mailpit")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		_ = http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "ok") }))
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	_, err = StartMailpit(ctx, MailpitOptions{HTTPAddr: l.Addr().String(), UIUser: "u", UIPassword: "p"})
	if !errors.Is(err, ErrAddrTaken) {
		t.Fatalf("start on a held address: %v, want ErrAddrTaken", err)
	}

	m, err := StartMailpit(ctx, MailpitOptions{UIUser: "u", UIPassword: "p", SMTPUser: "s", SMTPPassword: "q"})
	if err != nil {
		t.Fatal(err)
	}
	if !m.ready() {
		t.Fatal("not ready with its own login")
	}
	other := *m
	other.UIPassword = "another stack's"
	if other.ready() {
		t.Fatal("ready with a wrong login")
	}
	m.Stop()
	select {
	case <-m.Exited():
	case <-time.After(10 * time.Second):
		t.Fatal("Exited not closed after Stop")
	}
}
