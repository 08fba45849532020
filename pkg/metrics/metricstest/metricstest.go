// Package metricstest reads what a /metrics endpoint exposes, for tests.
package metricstest

import (
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Sample is one exposed value. Histograms appear as <name>_count,
// <name>_sum and <name>_bucket (with label le).
type Sample struct {
	Name   string
	Labels map[string]string
	Value  float64
}

func (s Sample) String() string {
	keys := make([]string, 0, len(s.Labels))
	for k := range s.Labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString(s.Name)
	for i, k := range keys {
		if i == 0 {
			b.WriteString("{")
		} else {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, "%s=%q", k, s.Labels[k])
	}
	if len(keys) > 0 {
		b.WriteString("}")
	}
	fmt.Fprintf(&b, " %g", s.Value)
	return b.String()
}

// Samples is a scrape.
type Samples []Sample

// Parse reads the Prometheus text format.
func Parse(r io.Reader) (Samples, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, err
	}
	var out Samples
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			add := func(n string, v float64, extra ...string) {
				ls := make(map[string]string, len(labels)+1)
				for k, v := range labels {
					ls[k] = v
				}
				for i := 0; i+1 < len(extra); i += 2 {
					ls[extra[i]] = extra[i+1]
				}
				out = append(out, Sample{Name: n, Labels: ls, Value: v})
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				add(name, m.GetCounter().GetValue())
			case dto.MetricType_GAUGE:
				add(name, m.GetGauge().GetValue())
			case dto.MetricType_UNTYPED:
				add(name, m.GetUntyped().GetValue())
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				add(name+"_count", float64(h.GetSampleCount()))
				add(name+"_sum", h.GetSampleSum())
				for _, b := range h.GetBucket() {
					add(name+"_bucket", float64(b.GetCumulativeCount()), "le", fmt.Sprint(b.GetUpperBound()))
				}
			case dto.MetricType_SUMMARY:
				s := m.GetSummary()
				add(name+"_count", float64(s.GetSampleCount()))
				add(name+"_sum", s.GetSampleSum())
			}
		}
	}
	return out, nil
}

// Scrape GETs url and parses the answer, failing the test unless it is a
// 200 in the text format.
func Scrape(t testing.TB, url string) Samples {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("scrape %s: status %d: %s", url, resp.StatusCode, b)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Fatalf("scrape %s: content type %q", url, ct)
	}
	s, err := Parse(resp.Body)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	return s
}

// Find returns the samples named name whose labels include the pairs given
// as "key", "value", ....
func (s Samples) Find(name string, pairs ...string) Samples {
	var out Samples
next:
	for _, x := range s {
		if x.Name != name {
			continue
		}
		for i := 0; i+1 < len(pairs); i += 2 {
			if v, ok := x.Labels[pairs[i]]; !ok || v != pairs[i+1] {
				continue next
			}
		}
		out = append(out, x)
	}
	return out
}

// Sum adds up the samples Find returns; ok is false when there are none.
func (s Samples) Sum(name string, pairs ...string) (sum float64, ok bool) {
	for _, x := range s.Find(name, pairs...) {
		sum += x.Value
		ok = true
	}
	return sum, ok
}

// Has reports whether a metric of that name is exposed at all.
func (s Samples) Has(name string) bool { return len(s.Find(name)) > 0 }

// Names returns the distinct metric names, sorted (for failure messages).
func (s Samples) Names() []string {
	seen := map[string]bool{}
	var out []string
	for _, x := range s {
		if !seen[x.Name] {
			seen[x.Name] = true
			out = append(out, x.Name)
		}
	}
	sort.Strings(out)
	return out
}
