package app

import (
	"os/exec"
	"strings"
	"testing"
)

// The gateway never talks to MongoDB, so it must not link the driver (a
// shared package that imports it would pull it in).
func TestGatewayDoesNotLinkMongoDB(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	out, err := exec.Command("go", "list", "-deps", "github.com/acme/platform/gateway").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.Contains(pkg, "mongo-driver") {
			t.Fatalf("the gateway links %s", pkg)
		}
	}
}
