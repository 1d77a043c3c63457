package workerhealthextension // import "github.com/workerwatch/workerwatch/extension/workerhealthextension"

// The HTML pages (internal/pages renders them).

import (
	"net/http"

	"github.com/workerwatch/workerwatch/extension/workerhealthextension/internal/store"
)

func (wh *workerHealth) handlePage(w http.ResponseWriter, r *http.Request) int {
	keep, err := store.ParseStateFilter(r.URL.Query()["state"])
	if err != nil {
		return writeError(w, http.StatusBadRequest, err.Error())
	}
	b, err := wh.page.Fleet(wh.viewFor(r), keep, wh.history, wh.now())
	return wh.writePage(w, b, err, "the status page")
}

func (wh *workerHealth) handleWorkerPage(w http.ResponseWriter, _ *http.Request, escapedID string) int {
	e, code := wh.lookup(w, escapedID)
	if e == nil {
		return code
	}
	b, err := wh.page.Worker(e.Worker, escapedID, wh.history, wh.now())
	return wh.writePage(w, b, err, "the worker page")
}

// writePage sends a rendered page with the pages' Content-Security-Policy,
// or a clean 500 when it could not be rendered.
func (wh *workerHealth) writePage(w http.ResponseWriter, b []byte, err error, what string) int {
	if err != nil {
		return writeError(w, http.StatusInternalServerError, "cannot render "+what)
	}
	h := w.Header()
	h["Content-Type"] = hdrHTML
	h["Content-Security-Policy"] = wh.page.CSP()
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b) //nolint:gosec // G705: html/template output, escaped by context, sent with the CSP
	return http.StatusOK
}
