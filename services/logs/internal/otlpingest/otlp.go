// Package otlpingest turns OTLP/HTTP log exports (POST /v1/logs) into log
// records and publishes them on the log stream, so that they reach the
// store through the same durable path as every NATS publisher.
//
// Exactly once per retry: every record of a request is published with the
// Nats-Msg-Id "otlp-<hash>-<index>", where hash is the SHA-256 of the
// (decompressed) request body. An exporter retrying a request it got no
// answer for sends the same bytes, so JetStream drops the copies of the
// records it already holds (within LOGS_DUPLICATE_WINDOW, 2 minutes by
// default, longer than an OTLP exporter retries) and the ingest stores each
// stream message once.
package otlpingest

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/acme/platform/pkg/logclient"
	"github.com/acme/platform/services/logs/internal/logs"
	collogs "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// MaxRecords bounds the records of one request.
const MaxRecords = 10000

// Record is one log record of a request, ready to publish.
type Record struct {
	Subject string
	MsgID   string
	Message logclient.Message
}

// ErrBadRequest wraps a request that cannot be decoded or holds an invalid
// record (400: an exporter does not retry it).
var ErrBadRequest = errors.New("invalid OTLP request")

// Decode parses an ExportLogsServiceRequest in protobuf
// (application/x-protobuf) or JSON (application/json) encoding.
func Decode(body []byte, isJSON bool) (*collogs.ExportLogsServiceRequest, error) {
	req := &collogs.ExportLogsServiceRequest{}
	if !isJSON {
		if err := proto.Unmarshal(body, req); err != nil {
			return nil, fmt.Errorf("%w: protobuf: %v", ErrBadRequest, err)
		}
		return req, nil
	}
	fixed, err := hexIDsToBase64(body)
	if err != nil {
		return nil, fmt.Errorf("%w: JSON: %v", ErrBadRequest, err)
	}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(fixed, req); err != nil {
		return nil, fmt.Errorf("%w: JSON: %v", ErrBadRequest, err)
	}
	return req, nil
}

// hexIDsToBase64 rewrites the traceId and spanId of every log record from
// the hex OTLP/JSON uses to the base64 protojson expects for bytes.
func hexIDsToBase64(body []byte) ([]byte, error) {
	var doc map[string]any
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, err
	}
	rls, _ := doc["resourceLogs"].([]any)
	for _, rl := range rls {
		rlm, _ := rl.(map[string]any)
		sls, _ := rlm["scopeLogs"].([]any)
		for _, sl := range sls {
			slm, _ := sl.(map[string]any)
			lrs, _ := slm["logRecords"].([]any)
			for _, lr := range lrs {
				lrm, _ := lr.(map[string]any)
				for _, k := range []string{"traceId", "spanId"} {
					s, ok := lrm[k].(string)
					if !ok || s == "" {
						continue
					}
					b, err := hex.DecodeString(s)
					if err != nil {
						return nil, fmt.Errorf("%s %q is not hex", k, s)
					}
					lrm[k] = base64.StdEncoding.EncodeToString(b)
				}
			}
		}
	}
	return json.Marshal(doc)
}

// Records maps a request to records: service.name (a resource attribute)
// is the app, the severity the type (ERROR and above: error; the rest:
// log), the body the message, followed by the trace and span ids, the
// severity text and the attributes as key=value pairs (so they are kept,
// shown and found by q=); the trace id is also the metricsId, so
// ?metricsId=<trace id> lists a trace's records. Nothing is returned unless
// every record is valid: an unknown app is a *logs.UnknownAppError.
func Records(req *collogs.ExportLogsServiceRequest, body []byte, prefix string, v logs.Validator, now time.Time) ([]Record, error) {
	sum := sha256.Sum256(body)
	hash := hex.EncodeToString(sum[:16])
	var out []Record
	for _, rl := range req.GetResourceLogs() {
		service := ""
		for _, kv := range rl.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				service = valueString(kv.GetValue())
			}
		}
		resAttrs := rl.GetResource().GetAttributes()
		for _, sl := range rl.GetScopeLogs() {
			for _, lr := range sl.GetLogRecords() {
				if len(out) >= MaxRecords {
					return nil, fmt.Errorf("%w: more than %d log records", ErrBadRequest, MaxRecords)
				}
				typ := logs.TypeLog
				if severityIsError(lr) {
					typ = logs.TypeError
				}
				msg := logclient.Message{App: service, Type: typ, LogBody: bodyText(lr, resAttrs, sl.GetScope())}
				if len(lr.GetTraceId()) == 16 {
					msg.MetricsID = hex.EncodeToString(lr.GetTraceId())
				}
				switch {
				case lr.GetTimeUnixNano() > 0:
					msg.CreatedAt = time.Unix(0, int64(lr.GetTimeUnixNano()))
				case lr.GetObservedTimeUnixNano() > 0:
					msg.CreatedAt = time.Unix(0, int64(lr.GetObservedTimeUnixNano()))
				default:
					msg.CreatedAt = now
				}
				msg.CreatedAt = msg.CreatedAt.UTC().Truncate(time.Millisecond)
				if _, err := v.Check(msg.App, msg.Type, msg.LogBody, msg.MetricsID); err != nil {
					var ua *logs.UnknownAppError
					if errors.As(err, &ua) {
						return nil, err
					}
					return nil, fmt.Errorf("%w: log record %d: %v", ErrBadRequest, len(out), err)
				}
				out = append(out, Record{
					Subject: logclient.Subject(prefix, msg.App, msg.Type),
					MsgID:   "otlp-" + hash + "-" + strconv.Itoa(len(out)),
					Message: msg,
				})
			}
		}
	}
	return out, nil
}

// severityIsError: SeverityNumber ERROR (17) and above, or, without a
// number, a severity text naming an error.
func severityIsError(lr *logspb.LogRecord) bool {
	if n := lr.GetSeverityNumber(); n != logspb.SeverityNumber_SEVERITY_NUMBER_UNSPECIFIED {
		return n >= logspb.SeverityNumber_SEVERITY_NUMBER_ERROR
	}
	switch strings.ToUpper(lr.GetSeverityText()) {
	case "ERROR", "ERR", "FATAL", "CRITICAL", "CRIT", "ALERT", "EMERGENCY", "PANIC":
		return true
	}
	return false
}

// bodyText is the record's message: the body, then trace_id, span_id,
// severity, event and the record's attributes (sorted by key) as key=value,
// values quoted when they hold blanks, quotes or '='. Resource attributes
// other than service.name and the scope name are added as resource.<key>
// and scope.
func bodyText(lr *logspb.LogRecord, res []*commonpb.KeyValue, scope *commonpb.InstrumentationScope) string {
	var b strings.Builder
	b.WriteString(valueString(lr.GetBody()))
	pair := func(k, v string) {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(k)
		b.WriteByte('=')
		if v == "" || strings.ContainsAny(v, " \t\r\n\"=") {
			v = strconv.Quote(v)
		}
		b.WriteString(v)
	}
	if id := lr.GetTraceId(); len(id) > 0 {
		pair("trace_id", hex.EncodeToString(id))
	}
	if id := lr.GetSpanId(); len(id) > 0 {
		pair("span_id", hex.EncodeToString(id))
	}
	if s := lr.GetSeverityText(); s != "" {
		pair("severity", s)
	}
	if e := lr.GetEventName(); e != "" {
		pair("event", e)
	}
	attrs := append([]*commonpb.KeyValue(nil), lr.GetAttributes()...)
	sort.SliceStable(attrs, func(i, j int) bool { return attrs[i].GetKey() < attrs[j].GetKey() })
	for _, kv := range attrs {
		pair(kv.GetKey(), valueString(kv.GetValue()))
	}
	if n := scope.GetName(); n != "" {
		pair("scope", n)
	}
	for _, kv := range res {
		if kv.GetKey() != "service.name" {
			pair("resource."+kv.GetKey(), valueString(kv.GetValue()))
		}
	}
	return b.String()
}

// valueString renders an AnyValue: strings as they are, scalars in their
// usual form, bytes in hex, arrays and maps as JSON.
func valueString(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case nil:
		return ""
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_BoolValue:
		return strconv.FormatBool(x.BoolValue)
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	case *commonpb.AnyValue_DoubleValue:
		return strconv.FormatFloat(x.DoubleValue, 'g', -1, 64)
	case *commonpb.AnyValue_BytesValue:
		return hex.EncodeToString(x.BytesValue)
	default:
		b, _ := json.Marshal(anyJSON(v))
		return string(b)
	}
}

func anyJSON(v *commonpb.AnyValue) any {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_ArrayValue:
		out := make([]any, 0, len(x.ArrayValue.GetValues()))
		for _, e := range x.ArrayValue.GetValues() {
			out = append(out, anyJSON(e))
		}
		return out
	case *commonpb.AnyValue_KvlistValue:
		out := map[string]any{}
		for _, kv := range x.KvlistValue.GetValues() {
			out[kv.GetKey()] = anyJSON(kv.GetValue())
		}
		return out
	default:
		return valueString(v)
	}
}
