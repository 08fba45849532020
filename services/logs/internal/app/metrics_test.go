package app_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/acme/platform/pkg/metrics/metricstest"
	"github.com/acme/platform/pkg/testkit/apptest"
)

// /metrics answers without an identity token and counts what the NATS
// consumer did: records stored, duplicates acked, poison dead-lettered.
func TestMetrics(t *testing.T) {
	v := startService(t, map[string]string{"LOGS_METRICS_INTERVAL": "100ms"})
	subj := v.prefix() + ".logs.ACME-S3.log"
	for i := range 3 {
		v.publish(subj, fmt.Sprint("m-", i), payload("ACME-S3", "log", fmt.Sprint("record ", i)))
	}
	// An id already stored (by an earlier delivery; written directly here).
	v.storeDirect("dup-1", "ACME-S3", "stored before")
	v.publish(subj, "dup-1", payload("ACME-S3", "log", "redelivered"))
	v.publish(subj, "poison-1", []byte("{not json"))
	apptest.Until(t, 20*time.Second, "records", func() bool { return v.count(nil) == 4 })
	apptest.Until(t, 10*time.Second, "consumer settled", v.settled)

	st, _ := v.do("POST", "/log", v.admin(), map[string]string{"app": "ACME-S3", "type": "log", "logBody": "over HTTP"})
	if st != 201 {
		t.Fatalf("POST /log: %d", st)
	}
	if st, _ := v.do("GET", "/log/log/1", "", nil); st != 401 {
		t.Fatalf("GET without a token: %d", st)
	}

	var s metricstest.Samples
	apptest.Until(t, 10*time.Second, "lag gauge refreshed", func() bool {
		s = metricstest.Scrape(t, v.base+"/metrics")
		p, ok := s.Sum("acme_logs_consumer_pending")
		a, _ := s.Sum("acme_logs_consumer_ack_pending")
		return ok && p == 0 && a == 0
	})
	for _, tc := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"acme_logs_ingested_total", nil, 3},
		{"acme_logs_duplicates_total", nil, 1},
		{"acme_logs_dead_lettered_total", nil, 1},
		{"acme_http_requests_total", []string{"route", "/log/", "method", "POST", "status", "201"}, 1},
		{"acme_http_requests_total", []string{"route", "unmatched", "method", "GET", "status", "401"}, 1},
	} {
		if got, ok := s.Sum(tc.name, tc.labels...); !ok || got != tc.want {
			t.Errorf("%s%v = %v (present %v), want %v\n%v", tc.name, tc.labels, got, ok, tc.want, s.Find(tc.name))
		}
	}
}

// The consumer's lag is JetStream's count of messages not yet delivered.
func TestConsumerLagMetric(t *testing.T) {
	v := startService(t, map[string]string{"LOGS_INGEST": "false", "LOGS_METRICS_INTERVAL": "100ms"})
	subj := v.prefix() + ".logs.SERVER-APP-A.error"
	for i := range 5 {
		v.publish(subj, fmt.Sprint("lag-", i), payload("SERVER-APP-A", "error", "waiting"))
	}
	apptest.Until(t, 10*time.Second, "consumer_pending = 5", func() bool {
		got, _ := metricstest.Scrape(t, v.base+"/metrics").Sum("acme_logs_consumer_pending")
		return got == 5
	})
}
