package embedded

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// With Auth the server answers a find only on a connection that logged
// in, with the setup user's password, and keeps that user across a
// restart.
func TestFerretDBAuthRequiresALogin(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real server; not in the fast tier (-short)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	p, err := StartFerretDB(ctx, FerretDBOptions{Dir: filepath.Join(t.TempDir(), "mongo"), Log: os.Stderr,
		Auth: &FerretDBAuth{User: "acme", Password: "s3cret-Pw"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	if strings.Contains(strings.Join(cmdline(t, p.Pid()), " "), "s3cret-Pw") {
		t.Error("the password is on the server's command line")
	}
	find := func(uri string) error {
		c, err := mongo.Connect(options.Client().ApplyURI(uri).SetServerSelectionTimeout(5 * time.Second))
		if err != nil {
			return err
		}
		defer c.Disconnect(ctx)
		if _, err := c.Database("acme").Collection("users").InsertOne(ctx, bson.M{"email": "a@b.c"}); err != nil {
			return err
		}
		return c.Database("acme").Collection("users").FindOne(ctx, bson.M{}).Err()
	}
	if err := find(p.URI); err != nil {
		t.Fatalf("with the login: %v", err)
	}
	anon := "mongodb://" + p.Addr + "/"
	var ce mongo.CommandError
	if err := find(anon); !errors.As(err, &ce) || ce.Code != 13 {
		t.Fatalf("without a login: %v, want Unauthorized (13)", err)
	}
	if err := find("mongodb://acme:wrong@" + p.Addr + "/?authSource=" + FerretDBAuthSource); err == nil {
		t.Fatal("a wrong password was accepted")
	}
	if err := p.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := find(p.URI); err != nil {
		t.Fatalf("with the login, after a restart: %v", err)
	}
}

func cmdline(t *testing.T, pid int) []string {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err != nil {
		t.Skip(err)
	}
	return strings.Split(string(b), "\x00")
}
