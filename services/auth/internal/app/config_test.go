package app_test

import (
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
