// Command buildminio builds the pinned MinIO server and the FerretDB server
// program (pkg/cmd/ferretdb, without the race detector) into the cache once,
// so the first test that needs them does not wait minutes inside a test
// timeout.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/acme/platform/pkg/embedded"
)

func main() {
	bin, err := embedded.MinIOBinary(context.Background(), os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("minio:", bin)
	fdb, err := embedded.FerretDBBinary(context.Background(), os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("ferretdb:", fdb)
}
