// Command ferretdb is the MongoDB-wire server the tests and fault suite run as
// a child process: the pinned FerretDB (v1.24, SQLite handler) that
// pkg/embedded also runs in-process, as a program of its own so that it is
// built once without the race detector and can be stopped, paused and
// restarted like a real database server. pkg/embedded.StartFerretDB builds and
// starts it.
//
//	ferretdb -listen 127.0.0.1:27017 -dir ./data/mongo
//
// SIGTERM or SIGINT stop it cleanly.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/FerretDB/FerretDB/ferretdb"
	"github.com/acme/platform/pkg/lazylog"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "ferretdb:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("ferretdb", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:27017", "TCP address to listen on")
	dir := fs.String("dir", "", "directory of the SQLite files (required)")
	level := fs.String("log-level", "error", "debug, info, warn or error")
	sync := fs.String("synchronous", "normal", "SQLite's synchronous setting in WAL mode: normal (no fsync per commit; a commit survives the process's death, not the machine's) or full (an fsync per commit)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" {
		return fmt.Errorf("-dir is required")
	}
	if *sync != "normal" && *sync != "full" {
		return fmt.Errorf("-synchronous: %q is neither normal nor full", *sync)
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*level)); err != nil {
		return fmt.Errorf("-log-level: %w", err)
	}
	if err := os.MkdirAll(*dir, 0o700); err != nil {
		return err
	}
	abs, err := filepath.Abs(*dir)
	if err != nil {
		return err
	}
	f, err := ferretdb.New(&ferretdb.Config{
		Listener:  ferretdb.ListenerConfig{TCP: *listen},
		Handler:   "sqlite",
		SQLiteURL: "file:" + abs + "/?_pragma=synchronous(" + *sync + ")",
		// Lazy: FerretDB adds whole documents as attributes to a logger
		// on every SQL statement; formatting them eagerly cost about an
		// eighth of its CPU time.
		Logger: slog.New(lazylog.New(slog.NewTextHandler(stderr, nil), lvl)),
	})
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lvl}))
	log.Info("ferretdb: listening", "addr", *listen, "dir", abs)
	return f.Run(ctx)
}
