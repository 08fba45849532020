package e2e

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlplog/otlploghttp"
	otellog "go.opentelemetry.io/otel/log"
	sdklog "go.opentelemetry.io/otel/sdk/log"
	"go.opentelemetry.io/otel/sdk/resource"
	"go.opentelemetry.io/otel/trace"
)

// dropFirst is a load balancer in front of the gateway whose first
// forwarded request loses its upstream connection once the gateway has
// answered: the client gets a 502, as from any proxy whose upstream
// connection dropped, although the request was served.
type dropFirst struct {
	next   http.RoundTripper
	mu     sync.Mutex
	bodies [][]byte // the (compressed) bodies forwarded, in order
}

func (d *dropFirst) RoundTrip(r *http.Request) (*http.Response, error) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, err
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	d.mu.Lock()
	d.bodies = append(d.bodies, body)
	first := len(d.bodies) == 1
	d.mu.Unlock()
	resp, err := d.next.RoundTrip(r)
	if err != nil || !first {
		return resp, err
	}
	status := resp.StatusCode
	resp.Body.Close() // the connection drops before the answer is passed on
	return nil, fmt.Errorf("upstream connection dropped after status %d", status)
}

// otelLogger is an OpenTelemetry logger provider for service, exporting with
// the SDK's OTLP/HTTP exporter to endpoint (gzip) with the credential.
func otelLogger(t *testing.T, endpoint, service, credential string) *sdklog.LoggerProvider {
	t.Helper()
	return otelLoggerWith(t, endpoint, service, map[string]string{"X-Service-Credential": credential})
}

// otelLoggerWith is otelLogger sending the given headers (an API key in
// Authorization, say).
func otelLoggerWith(t *testing.T, endpoint, service string, headers map[string]string) *sdklog.LoggerProvider {
	t.Helper()
	exp, err := otlploghttp.New(context.Background(),
		otlploghttp.WithEndpointURL(endpoint),
		otlploghttp.WithCompression(otlploghttp.GzipCompression),
		otlploghttp.WithHeaders(headers),
		otlploghttp.WithRetry(otlploghttp.RetryConfig{Enabled: true, InitialInterval: 100 * time.Millisecond, MaxInterval: time.Second, MaxElapsedTime: 30 * time.Second}),
	)
	if err != nil {
		t.Fatal(err)
	}
	res := resource.NewSchemaless(attribute.String("service.name", service), attribute.String("host.name", "e2e-host"))
	lp := sdklog.NewLoggerProvider(sdklog.WithResource(res),
		sdklog.WithProcessor(sdklog.NewBatchProcessor(exp, sdklog.WithExportInterval(time.Hour))))
	t.Cleanup(func() { _ = lp.Shutdown(context.Background()) })
	return lp
}

func emit(ctx context.Context, lp *sdklog.LoggerProvider, sev otellog.Severity, body string, attrs ...attribute.KeyValue) {
	var r otellog.Record
	r.SetTimestamp(time.Now())
	r.SetSeverity(sev)
	r.SetSeverityText(sev.String())
	r.SetBody(attribute.StringValue(body))
	r.AddAttributes(attrs...)
	lp.Logger("e2e").Emit(ctx, r)
}

// OpenTelemetry logs through the gateway: the SDK's OTLP/HTTP exporter as
// the client, records mapped to apps and types, attributes and trace ids
// kept, each record stored once although the first request is retried
// after its connection dropped; the service credential is required; bad
// requests get precise 4xx answers.
func TestOTLPLogsThroughGateway(t *testing.T) {
	p, sec, _ := platform(t, nil)
	gw := p.GatewayURL
	admin := signIn(t, gw, sec.AdminEmail, sec.AdminPassword)

	gwURL, _ := url.Parse(gw)
	lb := &dropFirst{next: http.DefaultTransport}
	rp := httputil.NewSingleHostReverseProxy(gwURL)
	rp.Transport = lb
	rp.ErrorLog = nil
	front := httptest.NewServer(rp)
	defer front.Close()

	lp := otelLogger(t, front.URL+"/v1/logs", "SERVER-APP-B", sec.ServiceCredential)
	traceID := trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36}
	spanID := trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7}
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{TraceID: traceID, SpanID: spanID, TraceFlags: trace.FlagsSampled}))
	emit(ctx, lp, otellog.SeverityError, "payment failed", attribute.String("order.id", "A-42"), attribute.Int("attempt", 3))
	emit(ctx, lp, otellog.SeverityFatal, "payment service down")
	emit(context.Background(), lp, otellog.SeverityInfo, "payment accepted", attribute.String("note", "two words"))
	emit(context.Background(), lp, otellog.SeverityWarn, "slow payment")
	if err := lp.ForceFlush(context.Background()); err != nil {
		t.Fatalf("export: %v", err)
	}
	if len(lb.bodies) != 2 || !bytes.Equal(lb.bodies[0], lb.bodies[1]) {
		t.Fatalf("the exporter sent %d requests; want the first and its retry, the same bytes", len(lb.bodies))
	}

	errs := waitLogs(t, admin, "/log/error/1/SERVER-APP-B", func(ls []map[string]any) bool { return len(ls) >= 2 })
	logsB := waitLogs(t, admin, "/log/log/1/SERVER-APP-B", func(ls []map[string]any) bool { return len(ls) >= 2 })
	time.Sleep(2 * time.Second) // a duplicate would be stored by now
	errs = logsOf(t, admin.mustStatus(201, "GET", "/log/error/1/SERVER-APP-B", nil))
	logsB = logsOf(t, admin.mustStatus(201, "GET", "/log/log/1/SERVER-APP-B", nil))
	if len(errs) != 2 || len(logsB) != 2 {
		t.Fatalf("stored %d errors and %d logs, want 2 and 2 (each once): %v %v", len(errs), len(logsB), errs, logsB)
	}
	tid := traceID.String()
	var failed map[string]any
	for _, r := range errs {
		if strings.HasPrefix(r["logBody"].(string), "payment failed") {
			failed = r
		}
	}
	if failed == nil || failed["metricsId"] != tid {
		t.Fatalf("error records: %v", errs)
	}
	for _, want := range []string{"trace_id=" + tid, "span_id=" + spanID.String(), "severity=ERROR", "order.id=A-42", "attempt=3", "resource.host.name=e2e-host"} {
		if !strings.Contains(failed["logBody"].(string), want) {
			t.Errorf("logBody %q lacks %q", failed["logBody"], want)
		}
	}
	if got, _ := search(t, admin, "/log/log/1/SERVER-APP-B?q="+url.QueryEscape(`note="two words"`)); len(got) != 1 {
		t.Fatalf("attribute search: %v", got)
	}
	if ls := logsOf(t, admin.mustStatus(201, "GET", "/log/error/1?metricsId="+tid, nil)); len(ls) != 2 {
		t.Fatalf("records of trace %s: %v", tid, ls)
	}

	// An unknown service.name: 404 with the known apps; nothing stored.
	bad := otelLogger(t, gw+"/v1/logs", "NO-SUCH-SERVICE", sec.ServiceCredential)
	emit(context.Background(), bad, otellog.SeverityError, "never stored")
	if err := bad.ForceFlush(context.Background()); err == nil || !strings.Contains(err.Error(), "404") || !strings.Contains(err.Error(), "knowApps") {
		t.Fatalf("unknown service: %v", err)
	}

	// A wrong credential: 401, not retried.
	wrong := otelLogger(t, gw+"/v1/logs", "SERVER-APP-B", "not-the-credential")
	emit(context.Background(), wrong, otellog.SeverityError, "never stored")
	if err := wrong.ForceFlush(context.Background()); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("wrong credential: %v", err)
	}

	// An administrator's API key with logs:write is the other way in; a
	// key without that scope is refused at the gateway, and a user's key
	// by the logs service (writing any application's records is an
	// administrator's right).
	writer := admin.mustStatus(201, "POST", "/me/api-keys", map[string]any{"name": "otel", "scopes": []string{"logs:write"}})["secret"].(string)
	byKey := otelLoggerWith(t, gw+"/v1/logs", "SERVER-APP-B", map[string]string{"Authorization": "Bearer " + writer})
	emit(context.Background(), byKey, otellog.SeverityError, "sent with an API key")
	if err := byKey.ForceFlush(context.Background()); err != nil {
		t.Fatalf("export with an API key: %v", err)
	}
	waitLogs(t, admin, "/log/error/1/SERVER-APP-B?q="+url.QueryEscape(`"sent with an API key"`), func(ls []map[string]any) bool { return len(ls) == 1 })
	reader := admin.mustStatus(201, "POST", "/me/api-keys", map[string]any{"name": "otel-read", "scopes": []string{"logs:read"}})["secret"].(string)
	noScope := otelLoggerWith(t, gw+"/v1/logs", "SERVER-APP-B", map[string]string{"Authorization": "Bearer " + reader})
	emit(context.Background(), noScope, otellog.SeverityError, "never stored")
	if err := noScope.ForceFlush(context.Background()); err == nil || !strings.Contains(err.Error(), "403") {
		t.Fatalf("a key without logs:write: %v", err)
	}

	// OTLP/JSON (hex ids), by hand, and bad requests.
	post := func(ct, enc string, body []byte, cred string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("POST", gw+"/v1/logs", bytes.NewReader(body))
		req.Header.Set("Content-Type", ct)
		if enc != "" {
			req.Header.Set("Content-Encoding", enc)
		}
		if cred != "" {
			req.Header.Set("X-Service-Credential", cred)
		}
		resp, err := newClient(t, gw).http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	jsonReq := `{"resourceLogs":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"SERVER-APP-C"}}]},
		"scopeLogs":[{"logRecords":[{"timeUnixNano":"1700000000000000000","severityNumber":17,"body":{"stringValue":"json export"},
		"traceId":"5b8efff798038103d269b633813fc60c","spanId":"eee19b7ec3c1b174","attributes":[{"key":"k","value":{"intValue":"7"}}]}]}]}]}`
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(jsonReq))
	zw.Close()
	if st, b := post("application/json", "gzip", gz.Bytes(), sec.ServiceCredential); st != 200 || b != "{}" {
		t.Fatalf("OTLP/JSON: %d %s", st, b)
	}
	ls := waitLogs(t, admin, "/log/error/1/SERVER-APP-C", func(ls []map[string]any) bool { return len(ls) == 1 })
	if ls[0]["metricsId"] != "5b8efff798038103d269b633813fc60c" || !strings.HasPrefix(ls[0]["logBody"].(string), "json export trace_id=5b8efff798038103d269b633813fc60c span_id=eee19b7ec3c1b174 k=7") ||
		ls[0]["createdAt"] != "2023-11-14T22:13:20Z" {
		t.Fatalf("OTLP/JSON record: %v", ls[0])
	}
	for _, c := range []struct {
		ct, enc string
		body    []byte
		cred    string
		status  int
		code    string
	}{
		{"application/json", "", []byte(jsonReq), "", 401, "invalid_service_credential"},
		{"text/plain", "", []byte(jsonReq), sec.ServiceCredential, 415, "unsupported_media_type"},
		{"application/json", "br", []byte(jsonReq), sec.ServiceCredential, 415, "unsupported_encoding"},
		{"application/json", "gzip", []byte(jsonReq), sec.ServiceCredential, 400, "invalid_gzip"},
		{"application/json", "", []byte(`{"resourceLogs":[{`), sec.ServiceCredential, 400, "invalid_otlp"},
		{"application/json", "", []byte(`{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"traceId":"zz"}]}]}]}`), sec.ServiceCredential, 400, "invalid_otlp"},
		{"application/x-protobuf", "", []byte{0xff, 0xff, 0xff}, sec.ServiceCredential, 400, "invalid_otlp"},
		{"application/json", "", []byte(strings.Replace(jsonReq, "SERVER-APP-C", "server-app-c", 1)), sec.ServiceCredential, 404, "unknown_app"},
	} {
		st, b := post(c.ct, c.enc, c.body, c.cred)
		if st != c.status || !strings.Contains(b, `"code":"`+c.code+`"`) {
			t.Errorf("%s %s %.40q: %d %s, want %d %s", c.ct, c.enc, c.body, st, b, c.status, c.code)
		}
	}
	if ls := logsOf(t, admin.mustStatus(201, "GET", "/log/error/1/SERVER-APP-C", nil)); len(ls) != 1 {
		t.Fatalf("refused requests stored records: %v", ls)
	}
}
