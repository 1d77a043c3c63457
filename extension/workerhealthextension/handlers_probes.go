package workerhealthextension // import "github.com/workerwatch/workerwatch/extension/workerhealthextension"

import "net/http"

// handleLivez: 200 unless a component failed fatally. Use it for the
// collector's liveness probe only.
func (wh *workerHealth) handleLivez(w http.ResponseWriter, _ *http.Request) int {
	ok, res := wh.status.live()
	return writeJSON(w, probeCode(ok), res)
}

// handleReadyz: 200 when the pipelines are up and no component has been in
// error longer than recovery_duration. Use it for the readiness probe.
func (wh *workerHealth) handleReadyz(w http.ResponseWriter, _ *http.Request) int {
	ok, res := wh.status.ready()
	return writeJSON(w, probeCode(ok), res)
}

func probeCode(ok bool) int {
	if ok {
		return http.StatusOK
	}
	return http.StatusServiceUnavailable
}
