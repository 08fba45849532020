package app

import (
	"testing"

	"github.com/acme/platform/pkg/config"
)

// TestSettingsTable: the table is well formed and loadConfig reads every
// setting in it (a setting read without being in the table panics).
func TestSettingsTable(t *testing.T) {
	if err := config.Join(Shared, Settings).Check(); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"GATEWAY_IDENTITY_PRIVATE_KEY": "k", "SERVICE_CREDENTIAL": "c"}
	_, r, err := loadConfig(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if unread := r.Unread(); len(unread) > 0 {
		t.Fatalf("settings in the table that loadConfig does not read: %q", unread)
	}
}

// TestConfigurationReference fails when docs/configuration.md's gateway
// table differs from the table in code (go run ./scripts/configdoc
// rewrites it).
func TestConfigurationReference(t *testing.T) {
	err := config.SyncReference("../../../docs/configuration.md", "gateway", config.Reference(Prefix, Settings), config.WriteReference())
	if err != nil {
		t.Fatal(err)
	}
}
