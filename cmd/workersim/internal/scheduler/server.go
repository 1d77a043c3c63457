package scheduler

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/workerwatch/workerwatch/cmd/workersim/internal/api"
)

// Handler serves the worker API (package api) on top of a State. emit
// receives the events each request produces.
func Handler(s *State, emit func([]Event)) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/claim", func(w http.ResponseWriter, r *http.Request) {
		var req api.ClaimRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.WorkerID == "" {
			http.Error(w, "want {worker_id, demand}", http.StatusBadRequest)
			return
		}
		runs, drop, events := s.Claim(req.WorkerID, req.Demand, time.Now())
		emit(events)
		if drop {
			// The claim is recorded but the answer never arrives, like a
			// response lost on the network: close the connection unanswered.
			if hj, ok := w.(http.Hijacker); ok {
				if conn, _, err := hj.Hijack(); err == nil {
					conn.Close()
					return
				}
			}
			panic(http.ErrAbortHandler)
		}
		writeJSON(w, api.ClaimResponse{Runs: append([]api.Run{}, runs...)})
	})
	mux.HandleFunc("POST /v1/runs/{id}/start", func(w http.ResponseWriter, r *http.Request) {
		req, ok := decode(w, r)
		if !ok {
			return
		}
		answer(w, s.Start(req.WorkerID, r.PathValue("id"), time.Now()))
	})
	mux.HandleFunc("POST /v1/runs/{id}/complete", func(w http.ResponseWriter, r *http.Request) {
		req, ok := decode(w, r)
		if !ok {
			return
		}
		held, events := s.Complete(req.WorkerID, r.PathValue("id"), req.Result, req.ErrorType)
		emit(events)
		answer(w, held)
	})
	mux.HandleFunc("POST /v1/runs/{id}/release", func(w http.ResponseWriter, r *http.Request) {
		req, ok := decode(w, r)
		if !ok {
			return
		}
		held, events := s.Release(req.WorkerID, r.PathValue("id"))
		emit(events)
		answer(w, held)
	})
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, s.Status())
	})
	return mux
}

func decode(w http.ResponseWriter, r *http.Request) (api.RunRequest, bool) {
	var req api.RunRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.WorkerID == "" {
		http.Error(w, "want {worker_id}", http.StatusBadRequest)
		return req, false
	}
	return req, true
}

// answer is 204 when the worker holds the run, 409 when the scheduler does
// not list it for that worker.
func answer(w http.ResponseWriter, held bool) {
	if !held {
		http.Error(w, "run not held by this worker", http.StatusConflict)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
