// Package api is the small HTTP protocol between the simulated scheduler and
// its workers, shaped after OpenFn's claim: a worker asks for up to `demand`
// runs, acknowledges each start, and reports completion.
//
//	POST /v1/claim                {"worker_id","demand"} -> {"runs":[Run...]}
//	POST /v1/runs/{id}/start      {"worker_id"}          -> 204 | 409
//	POST /v1/runs/{id}/complete   {"worker_id","result","error_type"} -> 204 | 409
//	POST /v1/runs/{id}/release    {"worker_id"}          -> 204 | 409
//	GET  /v1/status               -> Status
//
// 409 means the scheduler does not list the run for that worker (it was
// rolled back or never claimed by it).
package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// Run is one unit of work as the scheduler hands it out.
type Run struct {
	ID string `json:"id"`
	// MemoryBytes is what the run's child allocates and touches.
	MemoryBytes int64 `json:"memory_bytes"`
	// DurationMS is how long the child holds that memory.
	DurationMS int64 `json:"duration_ms"`
}

// Duration of the run.
func (r Run) Duration() time.Duration { return time.Duration(r.DurationMS) * time.Millisecond }

// ClaimRequest asks for up to Demand runs.
type ClaimRequest struct {
	WorkerID string `json:"worker_id"`
	Demand   int    `json:"demand"`
}

// ClaimResponse carries the runs assigned to the worker.
type ClaimResponse struct {
	Runs []Run `json:"runs"`
}

// RunRequest is the body of start, complete and release.
type RunRequest struct {
	WorkerID  string `json:"worker_id"`
	Result    string `json:"result,omitempty"`
	ErrorType string `json:"error_type,omitempty"`
}

// Status is the scheduler's view, for people and tests.
type Status struct {
	Pending int                 `json:"pending"`
	Held    map[string][]string `json:"held"`
	// Dropped: the held runs whose claim response was dropped (drop-claims):
	// the worker never learned of them, so it never starts them.
	Dropped map[string][]string `json:"dropped"`
}

// ErrNotHeld is returned when the scheduler answers 409.
var ErrNotHeld = errors.New("scheduler does not list the run for this worker")

// Client talks to the scheduler.
type Client struct {
	Base string // e.g. http://127.0.0.1:4567
	HTTP *http.Client
}

// NewClient returns a client with a short timeout: a dropped response must
// not stall a worker for long.
func NewClient(base string) *Client {
	return &Client{Base: base, HTTP: &http.Client{Timeout: 3 * time.Second}}
}

// Claim asks for up to demand runs.
func (c *Client) Claim(ctx context.Context, workerID string, demand int) ([]Run, error) {
	var resp ClaimResponse
	err := c.post(ctx, "/v1/claim", ClaimRequest{WorkerID: workerID, Demand: demand}, &resp)
	return resp.Runs, err
}

// Start acknowledges that the run's execution began.
func (c *Client) Start(ctx context.Context, workerID, runID string) error {
	return c.post(ctx, "/v1/runs/"+url.PathEscape(runID)+"/start", RunRequest{WorkerID: workerID}, nil)
}

// Complete reports the run's result.
func (c *Client) Complete(ctx context.Context, workerID, runID, result, errorType string) error {
	return c.post(ctx, "/v1/runs/"+url.PathEscape(runID)+"/complete",
		RunRequest{WorkerID: workerID, Result: result, ErrorType: errorType}, nil)
}

// Release gives the run back without finishing it.
func (c *Client) Release(ctx context.Context, workerID, runID string) error {
	return c.post(ctx, "/v1/runs/"+url.PathEscape(runID)+"/release", RunRequest{WorkerID: workerID}, nil)
}

func (c *Client) post(ctx context.Context, path string, body, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.Base+path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusConflict:
		return ErrNotHeld
	case resp.StatusCode/100 != 2:
		return fmt.Errorf("%s: HTTP %d", path, resp.StatusCode)
	case out != nil:
		return json.NewDecoder(resp.Body).Decode(out)
	}
	return nil
}
