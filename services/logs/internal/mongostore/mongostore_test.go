package mongostore_test

import (
	"testing"

	"github.com/acme/platform/pkg/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }
