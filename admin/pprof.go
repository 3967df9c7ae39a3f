package admin

import (
	"net/http"
	"net/http/pprof"
)

// pprofHandler serves Go's profiler (net/http/pprof) under /debug/pprof/:
// the index and the named profiles (heap, goroutine, allocs, block, mutex,
// threadcreate), cmdline, profile (CPU), symbol and trace. It is mounted
// only with Config.Pprof, behind the same bearer token as /metrics.
func pprofHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index) // also the named profiles: /debug/pprof/heap, ...
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}
