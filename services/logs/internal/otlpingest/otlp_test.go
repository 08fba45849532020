package otlpingest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/acme/platform/services/logs/internal/logs"
	collogs "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	"google.golang.org/protobuf/proto"
)

func str(s string) *commonpb.AnyValue {
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: s}}
}

func kv(k string, v *commonpb.AnyValue) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: v}
}

func request(service string, recs ...*logspb.LogRecord) *collogs.ExportLogsServiceRequest {
	return &collogs.ExportLogsServiceRequest{ResourceLogs: []*logspb.ResourceLogs{{
		Resource:  &resourcepb.Resource{Attributes: []*commonpb.KeyValue{kv("service.name", str(service)), kv("host.name", str("h1"))}},
		ScopeLogs: []*logspb.ScopeLogs{{Scope: &commonpb.InstrumentationScope{Name: "lib"}, LogRecords: recs}},
	}}}
}

var validator = logs.Validator{Apps: logs.NewApps([]logs.App{{ID: "a1", Name: "SERVER-APP-A"}}), MaxBody: 200}

func TestRecords(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	trace := []byte{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36}
	req := request("SERVER-APP-A",
		&logspb.LogRecord{TimeUnixNano: uint64(now.Add(-time.Second).UnixNano()), SeverityNumber: logspb.SeverityNumber_SEVERITY_NUMBER_ERROR,
			SeverityText: "ERROR", Body: str("payment failed"), TraceId: trace, SpanId: []byte{1, 2, 3, 4, 5, 6, 7, 8},
			Attributes: []*commonpb.KeyValue{kv("z", &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: 3}}), kv("a", str("two words"))}},
		&logspb.LogRecord{ObservedTimeUnixNano: uint64(now.Add(-time.Minute).UnixNano()), SeverityNumber: logspb.SeverityNumber_SEVERITY_NUMBER_WARN4, Body: str("slow")},
		&logspb.LogRecord{SeverityText: "fatal", Body: &commonpb.AnyValue{Value: &commonpb.AnyValue_KvlistValue{KvlistValue: &commonpb.KeyValueList{Values: []*commonpb.KeyValue{kv("k", str("v"))}}}}},
	)
	body, _ := proto.Marshal(req)
	recs, err := Records(req, body, "acme", validator, now)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 {
		t.Fatalf("%d records", len(recs))
	}
	want := []struct {
		subject, body, metricsID string
		at                       time.Time
	}{
		{"acme.logs.SERVER-APP-A.error", `payment failed trace_id=4bf92f3577b34da6a3ce929d0e0e4736 span_id=0102030405060708 severity=ERROR a="two words" z=3 scope=lib resource.host.name=h1`,
			"4bf92f3577b34da6a3ce929d0e0e4736", now.Add(-time.Second)},
		{"acme.logs.SERVER-APP-A.log", "slow scope=lib resource.host.name=h1", "", now.Add(-time.Minute)},
		{"acme.logs.SERVER-APP-A.error", `{"k":"v"} severity=fatal scope=lib resource.host.name=h1`, "", now},
	}
	for i, w := range want {
		r := recs[i]
		if r.Subject != w.subject || r.Message.LogBody != w.body || r.Message.MetricsID != w.metricsID || !r.Message.CreatedAt.Equal(w.at) {
			t.Errorf("record %d: %s %q %q %v, want %s %q %q %v", i, r.Subject, r.Message.LogBody, r.Message.MetricsID, r.Message.CreatedAt, w.subject, w.body, w.metricsID, w.at)
		}
	}
	// The message ids follow from the body alone: a retry has the same.
	again, _ := Records(req, body, "acme", validator, now.Add(time.Hour))
	other, _ := Records(req, append([]byte{0}, body...), "acme", validator, now)
	for i := range recs {
		if again[i].MsgID != recs[i].MsgID || other[i].MsgID == recs[i].MsgID || !strings.HasPrefix(recs[i].MsgID, "otlp-") {
			t.Fatalf("message ids %q, retry %q, other body %q", recs[i].MsgID, again[i].MsgID, other[i].MsgID)
		}
	}
	if recs[0].MsgID == recs[1].MsgID {
		t.Fatal("two records share a message id")
	}
}

func TestRecordsRefused(t *testing.T) {
	var ua *logs.UnknownAppError
	if _, err := Records(request("NOPE", &logspb.LogRecord{Body: str("x")}), nil, "acme", validator, time.Now()); !errors.As(err, &ua) || ua.Name != "NOPE" {
		t.Fatalf("unknown app: %v", err)
	}
	if _, err := Records(request("", &logspb.LogRecord{Body: str("x")}), nil, "acme", validator, time.Now()); !errors.As(err, &ua) {
		t.Fatalf("no service.name: %v", err)
	}
	long := &logspb.LogRecord{Body: str(strings.Repeat("x", 300))}
	if _, err := Records(request("SERVER-APP-A", &logspb.LogRecord{Body: str("ok")}, long), nil, "acme", validator, time.Now()); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("over-long body: %v", err)
	}
}

func TestDecodeJSON(t *testing.T) {
	js := `{"resourceLogs":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"SERVER-APP-A"}}]},
	  "scopeLogs":[{"logRecords":[{"severityNumber":17,"body":{"stringValue":"x"},"traceId":"5b8efff798038103d269b633813fc60c","spanId":"eee19b7ec3c1b174","unknownField":1}]}]}]}`
	req, err := Decode([]byte(js), true)
	if err != nil {
		t.Fatal(err)
	}
	lr := req.GetResourceLogs()[0].GetScopeLogs()[0].GetLogRecords()[0]
	if len(lr.GetTraceId()) != 16 || lr.GetTraceId()[0] != 0x5b || len(lr.GetSpanId()) != 8 {
		t.Fatalf("ids %x %x", lr.GetTraceId(), lr.GetSpanId())
	}
	for _, bad := range []string{`{`, `[]`, `{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"traceId":"xyz"}]}]}]}`, `{"resourceLogs":"no"}`} {
		if _, err := Decode([]byte(bad), true); !errors.Is(err, ErrBadRequest) {
			t.Errorf("%s: %v", bad, err)
		}
	}
	if _, err := Decode([]byte{0xff, 0xff}, false); !errors.Is(err, ErrBadRequest) {
		t.Errorf("bad protobuf: %v", err)
	}
}
