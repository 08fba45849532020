package containers

import (
	"os"
	"regexp"
	"strings"
)

// composeVar is a variable a compose file takes from the environment:
// ${NAME}, ${NAME:-x}, ${NAME:?msg}, $NAME, or a secret's
// `environment: NAME`.
var composeVar = regexp.MustCompile(`(?:\$\{?|environment:[ \t]*)([A-Za-z_][A-Za-z0-9_]*)`)

// HermeticEnv returns environ without the variables docker compose would
// take from the caller's shell in place of the project's own: every name
// the compose files substitute and every key of the project's .env (compose
// prefers the shell's value to the .env file's). A caller who exported
// ADMIN_PASSWORD for `make run`, say, does not change the tests' stack.
func HermeticEnv(environ, envKeys []string, composeFiles ...string) ([]string, error) {
	drop := map[string]bool{}
	for _, k := range envKeys {
		drop[k] = true
	}
	for _, f := range composeFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		for _, m := range composeVar.FindAllStringSubmatch(string(b), -1) {
			drop[m[1]] = true
		}
	}
	out := make([]string, 0, len(environ))
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		if !drop[k] {
			out = append(out, kv)
		}
	}
	return out, nil
}
