package config

import "testing"

// TestConfigurationReference fails when docs/configuration.md's shared
// settings differ from the tables in shared.go (go run ./scripts/configdoc
// rewrites them).
func TestConfigurationReference(t *testing.T) {
	if err := Shared.Check(); err != nil {
		t.Fatal(err)
	}
	if err := SyncReference("../../docs/configuration.md", "shared", Reference("", Shared), WriteReference()); err != nil {
		t.Fatal(err)
	}
}
