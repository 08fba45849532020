// Command probe is a container healthcheck for images without a shell or
// wget (the MinIO and NATS images of the compose deployment): it GETs each
// URL given and exits 0 when every answer is 2xx, 1 otherwise.
//
//	probe http://127.0.0.1:9000/minio/health/live
package main

import (
	"fmt"
	"os"

	"github.com/acme/platform/pkg/healthcheck"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: probe URL...")
		os.Exit(2)
	}
	for _, u := range os.Args[1:] {
		if err := healthcheck.ProbeURL(u); err != nil {
			fmt.Fprintln(os.Stderr, "probe:", err)
			os.Exit(1)
		}
	}
}
