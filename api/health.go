package api

import (
	"context"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"go.temporal.io/sdk/client"
)

// HealthData says a process or dependency is fine.
type HealthData struct {
	Status string `json:"status" example:"ok"`
}

func (s *Server) registerHealth() {
	public := map[string]any{"public": true}
	register(s, huma.Operation{
		OperationID: "healthz", Method: http.MethodGet, Path: "/healthz",
		Summary: "Process is alive", Tags: []string{"Health"}, Metadata: public,
	}, func(ctx context.Context, _ *struct{}) (*Response[HealthData], error) {
		return respond(HealthData{Status: "ok"}), nil
	})

	register(s, huma.Operation{
		OperationID: "readyz", Method: http.MethodGet, Path: "/readyz",
		Summary: "Database and Temporal are reachable", Tags: []string{"Health"}, Metadata: map[string]any{"public": true},
	}, func(ctx context.Context, _ *struct{}) (*Response[HealthData], error) {
		ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		var details []ErrorDetail
		if err := s.store.Ping(ctx); err != nil {
			details = append(details, ErrorDetail{Location: "database", Message: "not reachable"})
		}
		if _, err := s.temporal.CheckHealth(ctx, &client.CheckHealthRequest{}); err != nil {
			details = append(details, ErrorDetail{Location: "temporal", Message: "not reachable"})
		}
		if len(details) > 0 {
			return nil, newError(CodeUnavailable, "not ready", details...)
		}
		return respond(HealthData{Status: "ok"}), nil
	})
}
