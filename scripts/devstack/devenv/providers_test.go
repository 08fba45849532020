package devenv

import (
	"slices"
	"testing"
)

// make run passes on the variables of the providers named, and only
// those.
func TestProviderVariables(t *testing.T) {
	env := map[string]string{"AUTH_OIDC_PROVIDERS": "keycloak, my-idp"}
	got := providerVariables(func(k string) string { return env[k] })
	for _, k := range []string{"AUTH_GITHUB_CLIENT_ID", "AUTH_OIDC_KEYCLOAK_ISSUER", "AUTH_OIDC_MY_IDP_CLIENT_SECRET_FILE", "AUTH_PUBLIC_URL"} {
		if !slices.Contains(got, k) {
			t.Errorf("%s is not passed on", k)
		}
	}
	if slices.Contains(got, "AUTH_OIDC__ISSUER") || slices.Contains(got, "AUTH_OIDC_ENTRA_ISSUER") {
		t.Errorf("variables of a provider not named: %v", got)
	}
}
