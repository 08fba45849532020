// Command buildminio builds the pinned MinIO server into the cache once, so
// the first test that needs it does not wait minutes inside a test timeout.
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
}
