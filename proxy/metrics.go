package proxy

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	clustersResource      = schema.GroupResource{Group: Group, Resource: "clusters"}
	clustersProxyResource = schema.GroupResource{Group: rightGroup, Resource: "clusters/proxy"}
)

// metrics of proxied requests. The cluster label is set only for authorized
// requests, so that nobody can grow the label set by asking for clusters
// that do not exist; refusals are counted by reason.
type metrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	bytes    *prometheus.CounterVec
	refusals *prometheus.CounterVec
	// directTokens counts direct tokens issued, directRevoked those revoked.
	directTokens  prometheus.Counter
	directRevoked prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleet_proxy_requests_total",
			Help: "Requests fleet-proxy forwarded (or answered itself after authorization) by cluster and status code.",
		}, []string{"cluster", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "fleet_proxy_request_duration_seconds",
			Help:    "Duration of proxied requests by cluster, until the response (or the stream) ended.",
			Buckets: prometheus.ExponentialBuckets(0.005, 4, 10),
		}, []string{"cluster"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleet_proxy_response_bytes_total",
			Help: "Response body bytes proxied from clusters (not counting upgraded streams).",
		}, []string{"cluster"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleet_proxy_refused_total",
			Help: "Requests fleet-proxy refused before reaching a cluster, by reason.",
		}, []string{"reason"}),
		directTokens: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fleet_proxy_direct_tokens_issued_total",
			Help: "Direct tokens (authorized cluster endpoint) fleet-proxy issued.",
		}),
		directRevoked: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fleet_proxy_direct_tokens_revoked_total",
			Help: "Direct tokens this replica marked revoked: their holder lost clusters/proxy, their ServiceAccount or bound pod is gone, they were over the per-user quota, or an earlier release issued them.",
		}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.latency, m.bytes, m.refusals, m.directTokens, m.directRevoked} {
		if err := reg.Register(c); err != nil {
			are := prometheus.AlreadyRegisteredError{}
			if !errors.As(err, &are) {
				return nil, err
			}
		}
	}
	return m, nil
}

func (m *metrics) refused(reason string) { m.refusals.WithLabelValues(reason).Inc() }

func (m *metrics) done(cluster string, code int, start time.Time, n int64) {
	m.requests.WithLabelValues(cluster, strconv.Itoa(code)).Inc()
	m.latency.WithLabelValues(cluster).Observe(time.Since(start).Seconds())
	if n > 0 {
		m.bytes.WithLabelValues(cluster).Add(float64(n))
	}
}

// recorder notes the status code and body bytes of a response; it flushes
// and hijacks (upgrades) like the writer it wraps.
type recorder struct {
	http.ResponseWriter
	status   int
	bytes    int64
	hijacked bool
}

func newRecorder(w http.ResponseWriter) *recorder { return &recorder{ResponseWriter: w} }

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	n, err := r.ResponseWriter.Write(b)
	r.bytes += int64(n)
	return n, err
}

func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (r *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	h, ok := r.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("the response writer cannot be hijacked")
	}
	r.hijacked = true
	return h.Hijack()
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func (r *recorder) code() int {
	switch {
	case r.hijacked:
		return http.StatusSwitchingProtocols
	case r.status == 0:
		return http.StatusOK
	}
	return r.status
}
