package embedded

import (
	"context"
	"fmt"
	"net"
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

// The FerretDB process keeps its data across a stop and a restart on the same
// address, refuses work while stopped, and answers nothing while paused.
func TestFerretDBProcStopPauseRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real server; not in the fast tier (-short)")
	}
	ctx := context.Background()
	dir := t.TempDir()
	p, err := StartFerretDB(ctx, FerretDBOptions{Dir: filepath.Join(dir, "mongo"), Log: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	bin, _ := FerretDBBinary(ctx, nil)
	if want := FerretDBBinaryName(); filepath.Base(bin) != want || !strings.HasPrefix(want, "ferretdb-"+FerretDBVersion()+"-p"+FerretDBProgramVersion+"-") {
		t.Errorf("binary %s, want name %s", bin, want)
	}
	client, err := mongo.Connect(options.Client().ApplyURI(p.URI).SetServerSelectionTimeout(2 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Disconnect(ctx)
	coll := client.Database("kit").Collection("c")
	op := func(d time.Duration) error {
		ctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		_, err := coll.InsertOne(ctx, bson.M{"at": time.Now()})
		return err
	}
	if err := op(10 * time.Second); err != nil {
		t.Fatalf("insert: %v", err)
	}

	addr, pid := p.Addr, p.Pid()
	p.Stop()
	select {
	case <-p.Exited():
	default:
		t.Fatal("Stop returned before the process ended")
	}
	if err := op(time.Second); err == nil {
		t.Fatal("insert succeeded while the server was stopped")
	}
	if err := p.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if p.Addr != addr || p.Pid() == pid {
		t.Fatalf("restart: addr %s pid %d, before %s pid %d", p.Addr, p.Pid(), addr, pid)
	}
	if err := op(15 * time.Second); err != nil {
		t.Fatalf("insert after restart: %v", err)
	}
	n, err := coll.CountDocuments(ctx, bson.M{})
	if err != nil || n != 2 {
		t.Fatalf("after restart: %d documents (%v), want 2 (data dir kept)", n, err)
	}

	if err := p.Pause(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := op(500 * time.Millisecond); err == nil {
		status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.Pid()))
		state := ""
		for _, line := range strings.Split(string(status), "\n") {
			if strings.HasPrefix(line, "State:") {
				state = line
			}
		}
		t.Fatalf("insert succeeded while the server (pid %d, %s, %s) was paused", p.Pid(), state, p.Addr)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("paused insert took %s despite a 500ms deadline", el)
	}
	if err := p.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := op(15 * time.Second); err != nil {
		t.Fatalf("insert after resume: %v", err)
	}
}

// TestFerretDBUsesTheIDIndex: the server program is built with the patch
// that makes lookups by _id (string and ObjectID) use the _id index: the
// SQLite plan FerretDB's explain returns says SEARCH ... USING INDEX, not
// SCAN (without the patch it is a SCAN of the whole table).
func TestFerretDBUsesTheIDIndex(t *testing.T) {
	db := pushdownDB(t)
	ctx := context.Background()
	if _, err := db.Collection("c").InsertMany(ctx, []any{bson.M{"_id": "a#1"}, bson.M{"_id": bson.NewObjectID()}}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []any{"a#2", bson.NewObjectID()} {
		var res bson.M
		cmd := bson.D{{Key: "explain", Value: bson.D{{Key: "find", Value: "c"}, {Key: "filter", Value: bson.D{{Key: "_id", Value: id}}}}}}
		if err := db.RunCommand(ctx, cmd).Decode(&res); err != nil {
			t.Fatal(err)
		}
		plan := fmt.Sprint(res["queryPlanner"])
		if !strings.Contains(plan, "USING INDEX") || strings.Contains(plan, "SCAN") {
			t.Errorf("lookup of _id %v: plan %s, want a SEARCH using the _id index", id, plan)
		}
		if res["filterPushdown"] != true {
			t.Errorf("lookup of _id %v: filter not pushed down: %v", id, res)
		}
	}
}

// A FerretDB process started on an address another process already answers
// on reports that, instead of passing the other process off as itself
// (which a restart on the same address once did: the port had been handed
// to another server meanwhile, and the test talked to that one).
func TestFerretDBStartRefusesAForeignListener(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real server; not in the fast tier (-short)")
	}
	addr, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	start := time.Now()
	p, err := StartFerretDB(context.Background(), FerretDBOptions{Dir: filepath.Join(t.TempDir(), "mongo"), Addr: addr})
	if err == nil {
		p.Stop()
		t.Fatalf("started on %s, which another listener holds", addr)
	}
	t.Logf("refused after %s: %v", time.Since(start).Round(time.Millisecond), err)
}

// FreeAddr draws ports from below the kernel's ephemeral range, where no
// other process is handed one by the kernel.
func TestFreeAddrBelowEphemeralRange(t *testing.T) {
	lo, hi := belowEphemeral()
	if lo >= hi {
		t.Skip("no ip_local_port_range here")
	}
	for range 20 {
		a, err := FreeAddr()
		if err != nil {
			t.Fatal(err)
		}
		_, port, _ := net.SplitHostPort(a)
		n, _ := strconv.Atoi(port)
		if n < lo || n >= hi {
			t.Fatalf("%s: port outside [%d, %d)", a, lo, hi)
		}
	}
}
