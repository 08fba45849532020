// Package composecheck checks the docker compose deployment as far as a
// machine without a Docker engine can: its tests load compose.yaml with the
// compose specification's own loader (github.com/compose-spec/compose-go),
// read the Dockerfiles, and run deploy/nats.conf on a real nats-server to
// prove each service's permissions. The helpers here are shared with the
// test of scripts/gensecrets.
package composecheck

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
)

// RepoRoot is the directory holding go.work, found from the working
// directory upwards (tests run in their package directory).
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.work not found above the working directory")
		}
		dir = parent
	}
}

// LoadProject loads root/compose.yaml as `docker compose` would, with env
// as the only environment (neither the process's nor a .env file is read,
// so an operator's secrets never leak into a test). interpolate false keeps
// ${VAR} references as written.
func LoadProject(ctx context.Context, root string, env map[string]string, interpolate bool) (*types.Project, error) {
	return LoadFiles(ctx, root, env, interpolate)
}

// LoadFiles is LoadProject with further compose files after compose.yaml
// (overrides such as compose.ha.yaml), named relative to root.
func LoadFiles(ctx context.Context, root string, env map[string]string, interpolate bool, files ...string) (*types.Project, error) {
	var list []string
	for k, v := range env {
		list = append(list, k+"="+v)
	}
	paths := []string{filepath.Join(root, "compose.yaml")}
	for _, f := range files {
		paths = append(paths, filepath.Join(root, f))
	}
	opts, err := cli.NewProjectOptions(paths,
		cli.WithWorkingDirectory(root),
		cli.WithEnv(list),
		cli.WithInterpolation(interpolate),
		cli.WithResolvedPaths(true),
	)
	if err != nil {
		return nil, err
	}
	return opts.LoadProject(ctx)
}

// SecretEnvVars lists the variables the project's secrets are read from
// (`secrets: x: {environment: VAR}`), sorted.
func SecretEnvVars(p *types.Project) []string {
	var out []string
	for _, s := range p.Secrets {
		if s.Environment != "" {
			out = append(out, s.Environment)
		}
	}
	sort.Strings(out)
	return out
}

// SecretPath is where a service's secret is mounted in its container.
func SecretPath(s types.ServiceSecretConfig) string {
	switch {
	case s.Target == "":
		return "/run/secrets/" + s.Source
	case strings.HasPrefix(s.Target, "/"):
		return s.Target
	default:
		return "/run/secrets/" + s.Target
	}
}

// Instruction is one Dockerfile instruction.
type Instruction struct {
	Cmd  string // upper case: FROM, RUN, COPY, USER, ...
	Args string // the rest, continuation lines joined
	Line int    // where it starts
}

// Stage is one FROM and the instructions after it.
type Stage struct {
	Image, Name  string
	Instructions []Instruction
}

// Last returns the stage's last instruction cmd, if any.
func (s Stage) Last(cmd string) (Instruction, bool) {
	for i := len(s.Instructions) - 1; i >= 0; i-- {
		if s.Instructions[i].Cmd == cmd {
			return s.Instructions[i], true
		}
	}
	return Instruction{}, false
}

// ParseDockerfile splits a Dockerfile into stages. It understands what our
// Dockerfiles use: comments, backslash continuations, global ARG NAME=default
// lines and FROM image [AS name], where the image may be ${NAME} of such an
// ARG (Stage.Image is then its default, what a user's build uses); not parser
// directives or heredocs.
func ParseDockerfile(text string) ([]Stage, error) {
	var stages []Stage
	globals := map[string]string{}
	var cur strings.Builder
	start := 0
	flush := func() error {
		line := strings.TrimSpace(cur.String())
		cur.Reset()
		if line == "" {
			return nil
		}
		cmd, args, _ := strings.Cut(line, " ")
		in := Instruction{Cmd: strings.ToUpper(cmd), Args: strings.TrimSpace(args), Line: start}
		if in.Cmd == "FROM" {
			f := strings.Fields(in.Args)
			image := f[0]
			if name, ok := strings.CutPrefix(image, "${"); ok && strings.HasSuffix(name, "}") {
				def, ok := globals[strings.TrimSuffix(name, "}")]
				if !ok {
					return fmt.Errorf("line %d: FROM %s names no global ARG with a default", in.Line, image)
				}
				image = def
			}
			st := Stage{Image: image}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				st.Name = f[2]
			}
			stages = append(stages, st)
			return nil
		}
		if len(stages) == 0 {
			if in.Cmd == "ARG" { // global build arguments
				if name, def, ok := strings.Cut(in.Args, "="); ok {
					globals[name] = def
				}
				return nil
			}
			return fmt.Errorf("line %d: %s before FROM", in.Line, in.Cmd)
		}
		stages[len(stages)-1].Instructions = append(stages[len(stages)-1].Instructions, in)
		return nil
	}
	sc := bufio.NewScanner(strings.NewReader(text))
	n := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") {
			continue
		}
		if cur.Len() == 0 {
			if trimmed == "" {
				continue
			}
			start = n
		}
		if body, ok := strings.CutSuffix(strings.TrimRight(line, " \t"), "\\"); ok {
			cur.WriteString(body + " ")
			continue
		}
		cur.WriteString(line)
		if err := flush(); err != nil {
			return nil, err
		}
	}
	if err := flush(); err != nil {
		return nil, err
	}
	if len(stages) == 0 {
		return nil, errors.New("no FROM")
	}
	return stages, sc.Err()
}
