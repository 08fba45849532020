// Command configdoc regenerates the settings tables of
// docs/configuration.md from the tables in code: pkg/config's shared
// settings, each service's internal/app settings and deploy/s3setup's.
//
//	go run ./scripts/configdoc          # rewrite the tables
//	go run ./scripts/configdoc -check   # only compare (what the tests do)
//
// Each table is owned by one package's TestConfigurationReference (the
// service tables live in internal packages no other module can import);
// this command runs those tests one after the other with
// ACME_WRITE_CONFIG_DOC=1, which makes them rewrite their section instead
// of comparing it.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/acme/platform/scripts/stack"
)

// owners are the module directories and packages whose
// TestConfigurationReference owns a section of docs/configuration.md.
var owners = []struct{ dir, pkg string }{
	{"pkg", "./config"},
	{"gateway", "./internal/app"},
	{"services/auth", "./internal/app"},
	{"services/files", "./internal/app"},
	{"services/logs", "./internal/app"},
	{"deploy/s3setup", "."}, // outside the workspace: its own go.mod
}

func main() {
	check := flag.Bool("check", false, "compare only; exit 1 when a table differs from the code")
	flag.Parse()
	if err := run(*check); err != nil {
		fmt.Fprintln(os.Stderr, "configdoc:", err)
		os.Exit(1)
	}
}

func run(check bool) error {
	root, err := stack.Root()
	if err != nil {
		return err
	}
	var failed []string
	for _, o := range owners {
		cmd := exec.Command("go", "test", "-count=1", "-run", "^TestConfigurationReference$", o.pkg)
		cmd.Dir = filepath.Join(root, o.dir)
		cmd.Env = append(os.Environ(), "ACME_WRITE_CONFIG_DOC=1")
		if check {
			cmd.Env = append(os.Environ(), "ACME_WRITE_CONFIG_DOC=")
		}
		if o.dir == "deploy/s3setup" {
			cmd.Env = append(cmd.Env, "GOWORK=off")
		}
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			failed = append(failed, o.dir)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("failed in %v", failed)
	}
	return nil
}
