package httpapi

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/subtle"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/acme/platform/pkg/identity"
	"github.com/acme/platform/pkg/web"
	"github.com/acme/platform/services/logs/internal/otlpingest"
	"github.com/gofiber/fiber/v2"
	collogs "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	"google.golang.org/protobuf/proto"
)

// ServiceCredentialHeader carries a calling service's credential.
const ServiceCredentialHeader = "X-Service-Credential"

// MaxOTLPBody bounds an OTLP request body once decompressed.
const MaxOTLPBody = 16 << 20

// OTLPPublisher puts OTLP records on the log stream (otlpingest.Publisher).
type OTLPPublisher interface {
	Publish(ctx context.Context, recs []otlpingest.Record) error
}

// authorizeLogsWrite admits a caller that may write logs: a service
// presenting one of the service credentials (SERVICE_CREDENTIAL[S]), or a
// program whose API key the gateway resolved and found to carry the
// logs:write scope, when the key's owner is an administrator (writing any
// application's records is an administrator's right, as on POST /log).
func (a *API) authorizeLogsWrite(c *fiber.Ctx) error {
	got := []byte(c.Get(ServiceCredentialHeader))
	for _, want := range a.ServiceCredentials {
		if len(got) > 0 && subtle.ConstantTimeCompare(got, []byte(want)) == 1 {
			return nil
		}
	}
	if id := web.Identity(c); id != nil && id.UserID() != "" {
		if id.Role != identity.RoleAdmin {
			return errOTLPNotAdmin
		}
		return nil
	}
	return errOTLPCaller
}

// otlpLogs: POST /v1/logs (OTLP/HTTP, protobuf or JSON, gzip or not) →
// 200 with an empty ExportLogsServiceResponse in the request's encoding,
// once every record is in the log stream.
func (a *API) otlpLogs(c *fiber.Ctx) error {
	if err := a.authorizeLogsWrite(c); err != nil {
		return err
	}
	if a.OTLP == nil {
		return errOTLPOff
	}
	mt, _, err := mime.ParseMediaType(c.Get(fiber.HeaderContentType))
	isJSON := mt == fiber.MIMEApplicationJSON
	if err != nil || !(isJSON || mt == "application/x-protobuf") {
		return web.Errorf(http.StatusUnsupportedMediaType, "unsupported_media_type", "content type must be application/x-protobuf or application/json")
	}
	// The raw body: Fiber's c.Body() would inflate gzip without a bound.
	raw := c.Request().Body()
	var body []byte
	switch enc := strings.ToLower(c.Get(fiber.HeaderContentEncoding)); enc {
	case "", "identity":
		body = raw
	case "gzip":
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			return web.FieldError("body", "invalid_gzip", "the body is not gzip data")
		}
		if body, err = io.ReadAll(io.LimitReader(zr, MaxOTLPBody+1)); err != nil {
			return web.FieldError("body", "invalid_gzip", "the body is not valid gzip data")
		}
	default:
		return web.Errorf(http.StatusUnsupportedMediaType, "unsupported_encoding", "content encoding must be gzip or none")
	}
	if len(body) > MaxOTLPBody {
		return web.Errorf(http.StatusRequestEntityTooLarge, "body_too_large", "the decompressed body is over 16 MiB")
	}
	req, err := otlpingest.Decode(body, isJSON)
	if err != nil {
		return web.FieldError("body", "invalid_otlp", err.Error())
	}
	recs, err := otlpingest.Records(req, body, a.Prefix, a.Validator, a.Now())
	if err != nil {
		return fail(err, errScope{})
	}
	if err := a.OTLP.Publish(c.UserContext(), recs); err != nil {
		return streamUnavailable(err)
	}
	if isJSON {
		c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
		return c.Status(http.StatusOK).SendString("{}")
	}
	out, _ := proto.Marshal(&collogs.ExportLogsServiceResponse{})
	c.Set(fiber.HeaderContentType, "application/x-protobuf")
	return c.Status(http.StatusOK).Send(out)
}
