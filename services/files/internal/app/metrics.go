package app

import (
	"github.com/acme/platform/pkg/metrics"
	"github.com/acme/platform/services/files/internal/files"
	"github.com/acme/platform/services/files/internal/httpapi"
	"github.com/prometheus/client_golang/prometheus"
)

// filesMetrics are the service's own instruments (docs/operations.md); they
// implement httpapi.Meter.
type filesMetrics struct {
	uploaded, downloaded prometheus.Counter
	uploads              *prometheus.CounterVec
}

func newFilesMetrics(reg prometheus.Registerer) *filesMetrics {
	m := &filesMetrics{
		uploaded: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: "files", Name: "uploaded_bytes_total",
			Help: "Bytes of upload request bodies (multipart, on /upload/file and /upload/image) read, counted as they arrive, finished or not.",
		}),
		downloaded: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: "files", Name: "downloaded_bytes_total",
			Help: "Bytes of file and image bodies sent (/download/file, /images), counted as they are sent.",
		}),
		uploads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: "files", Name: "uploads_total",
			Help: "Finished uploads by kind (file, image) and result: ok, rejected (the client's fault, 4xx), failed (5xx).",
		}, []string{"kind", "result"}),
	}
	reg.MustRegister(m.uploaded, m.downloaded, m.uploads)
	for _, k := range []string{httpapi.KindFile, httpapi.KindImage} {
		for _, r := range []string{httpapi.UploadOK, httpapi.UploadRejected, httpapi.UploadFailed} {
			m.uploads.WithLabelValues(k, r)
		}
	}
	return m
}

func (m *filesMetrics) Uploaded(n int)   { m.uploaded.Add(float64(n)) }
func (m *filesMetrics) Downloaded(n int) { m.downloaded.Add(float64(n)) }
func (m *filesMetrics) Upload(kind, result string) {
	m.uploads.WithLabelValues(kind, result).Inc()
}

// variantMetaCache bounds the image variants each process describes from
// memory (about 300 bytes each).
const variantMetaCache = 20000

// registerVariantMetrics counts the variants rendered and stored.
func registerVariantMetrics(reg prometheus.Registerer, svc *files.Service) {
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: "files", Name: "image_variants_rendered_total",
		Help: "Image variants this process rendered and stored (a variant found in the object store is not counted).",
	}, func() float64 { return float64(svc.VariantRenders()) }))
}
