// Command copyrecords writes every record the logs service keeps, and that
// log_records does not hold yet, to log_records as plain documents, for
// MongoDB's own tools (mongosh, Compass, mongoexport): the records stored
// before log_records existed, or while LOGS_RECORD_DOCUMENTS was off.
//
//	MONGO_URL=mongodb://127.0.0.1:27017 MONGO_DB=acme go run ./cmd/copyrecords
//
// MONGO_URL, MONGO_USER, MONGO_PASSWORD(_FILE) and MONGO_DB are read as the
// service reads them (LOGS_ first).
// It reads every chunk of the type chains once and may run again, and
// beside running replicas; records documents already there are left as
// they are.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"

	"github.com/acme/platform/pkg/config"
	"github.com/acme/platform/services/logs/internal/mongostore"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "copyrecords:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	r := config.New("LOGS", os.Getenv, config.Mongo)
	url, db := r.MongoURL(), r.String("MONGO_DB")
	if err := r.Err(); err != nil {
		return err
	}
	client, err := mongo.Connect(options.Client().ApplyURI(url))
	if err != nil {
		return err
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	st := mongostore.New(client.Database(db))
	n, err := st.CopyAllRecords(ctx)
	fmt.Printf("looked at %d chunks of the type chains\n", n)
	return err
}
