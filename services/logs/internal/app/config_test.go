package app_test

import (
	"testing"

	"github.com/acme/platform/pkg/config"
	"github.com/acme/platform/services/logs/internal/app"
)

// TestSettingsTable: the table is well formed and Load reads every
// setting in it (a setting read without being in the table panics).
func TestSettingsTable(t *testing.T) {
	if err := config.Join(app.Shared, app.Table).Check(); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"IDENTITY_PUBLIC_KEY": "x"}
	_, r, err := app.Load(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if unread := r.Unread(); len(unread) > 0 {
		t.Fatalf("settings in the table that Load does not read: %q", unread)
	}
}

// TestConfigurationReference fails when docs/configuration.md's logs
// table differs from the table in code (go run ./scripts/configdoc
// rewrites it).
func TestConfigurationReference(t *testing.T) {
	err := config.SyncReference("../../../../docs/configuration.md", "logs", config.Reference(app.Prefix, app.Table), config.WriteReference())
	if err != nil {
		t.Fatal(err)
	}
}
