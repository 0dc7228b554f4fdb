package metrics

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Handler serves reg on /metrics (Prometheus text or protobuf) and answers
// /healthz with 200 "ok".
func Handler(reg *prometheus.Registry) http.Handler { return ReadyHandler(reg, nil) }

// ReadyHandler is Handler whose /healthz asks ready first: while it
// returns an error /healthz answers 503 with the error's text (a process
// still starting), then 200 "ok". A nil ready is always ready.
func ReadyHandler(reg *prometheus.Registry, ready func() error) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, ErrorHandling: promhttp.ContinueOnError}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if ready != nil {
			if err := ready(); err != nil {
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = w.Write([]byte(err.Error() + "\n"))
				return
			}
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	return mux
}

// ServeMetrics listens on addr ("127.0.0.1:9090", ":9090") and serves
// Handler(reg) until stop is called. The error is a failure to listen.
func ServeMetrics(addr string, reg *prometheus.Registry) (stop func(), err error) {
	return ServeMetricsReady(addr, reg, nil)
}

// ServeMetricsReady is ServeMetrics with ReadyHandler's ready.
func ServeMetricsReady(addr string, reg *prometheus.Registry, ready func() error) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: listen on %s: %w", addr, err)
	}
	return serve(ln, ReadyHandler(reg, ready)), nil
}

// Serve serves Handler(reg) on ln (which it closes on stop). stop waits up
// to 5 s for scrapes under way.
func Serve(ln net.Listener, reg *prometheus.Registry) (stop func()) { return serve(ln, Handler(reg)) }

// serve serves h on ln until stop.
func serve(ln net.Listener, h http.Handler) (stop func()) {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln) // http.ErrServerClosed after stop; a failed listener has no one to tell
	}()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if srv.Shutdown(ctx) != nil {
			_ = srv.Close()
		}
		<-done
	}
}
