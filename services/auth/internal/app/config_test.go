package app_test

import (
	"maps"
	"testing"

	"github.com/acme/platform/pkg/config"
	"github.com/acme/platform/services/auth/internal/app"
)

// TestSettingsTable: the table is well formed and LoadConfig reads every
// setting in it (a setting read without being in the table panics).
func TestSettingsTable(t *testing.T) {
	if err := config.Join(app.Shared, app.Settings).Check(); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"IDENTITY_PUBLIC_KEY": "x", "SERVICE_CREDENTIAL": "c"}
	_, r, err := app.LoadConfig(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if unread := r.Unread(); len(unread) > 0 {
		t.Fatalf("settings in the table that LoadConfig does not read: %q", unread)
	}
}

// TestConfigurationReference fails when docs/configuration.md's auth
// table differs from the table in code (go run ./scripts/configdoc
// rewrites it).
func TestConfigurationReference(t *testing.T) {
	err := config.SyncReference("../../../../docs/configuration.md", "auth", config.Reference(app.Prefix, app.Settings), config.WriteReference())
	if err != nil {
		t.Fatal(err)
	}
	// Each OpenID Connect provider's settings, for a provider <NAME>.
	err = config.SyncReference("../../../../docs/configuration.md", "auth-oidc-provider", config.Reference(app.Prefix, app.ProviderSettings("<NAME>")), config.WriteReference())
	if err != nil {
		t.Fatal(err)
	}
}

// TestMemoryLimit: AUTH_MEMORY_LIMIT defaults to the room of the hashes
// that may run at once (following the hash settings), a value set wins,
// and a negative one is refused.
func TestMemoryLimit(t *testing.T) {
	load := func(extra map[string]string) (app.Config, error) {
		env := map[string]string{"IDENTITY_PUBLIC_KEY": "x", "SERVICE_CREDENTIAL": "c"}
		maps.Copy(env, extra)
		cfg, _, err := app.LoadConfig(func(k string) string { return env[k] })
		return cfg, err
	}
	for _, tc := range []struct {
		env  map[string]string
		want int64
	}{
		{map[string]string{"AUTH_HASH_CONCURRENCY": "2"}, 48<<20 + 2*2*19456<<10},
		{map[string]string{"AUTH_HASH_CONCURRENCY": "4", "AUTH_ARGON2_MEMORY_KIB": "65536"}, 48<<20 + 2*4*64<<20},
		{map[string]string{"AUTH_HASH_CONCURRENCY": "4", "AUTH_MEMORY_LIMIT": "300MiB"}, 300 << 20},
	} {
		cfg, err := load(tc.env)
		if err != nil || cfg.MemoryLimit != tc.want {
			t.Errorf("%v: memory limit %d, %v; want %d", tc.env, cfg.MemoryLimit, err, tc.want)
		}
	}
	if _, err := load(map[string]string{"AUTH_MEMORY_LIMIT": "-1"}); err == nil {
		t.Error("a negative AUTH_MEMORY_LIMIT was accepted")
	}
}
