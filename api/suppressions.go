package api

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/mailyard/mailyard/internal/store"
)

// Suppression is one recipient the organization no longer sends to.
type Suppression struct {
	Email     string    `json:"email" example:"ada@example.com" doc:"The address, lower-cased entirely."`
	Reason    string    `json:"reason" enum:"hard_bounce,complaint,unsubscribe" doc:"hard_bounce: a delivery to it failed permanently; complaint: the recipient marked a message as spam; unsubscribe: the recipient used one-click unsubscribe, which stops only emails sent with unsubscribe on."`
	CreatedAt time.Time `json:"created_at" doc:"When it was first suppressed."`
}

func suppressionFromStore(s *store.Suppression) Suppression {
	return Suppression{Email: s.Email, Reason: s.Reason, CreatedAt: s.CreatedAt.UTC()}
}

// SuppressionList is the data of List suppressions.
type SuppressionList struct {
	Suppressions []Suppression `json:"suppressions"`
	PageInfo
}

// SuppressionData wraps one suppression.
type SuppressionData struct {
	Suppression Suppression `json:"suppression"`
}

// ListSuppressionsInput pages through the suppression list.
type ListSuppressionsInput struct {
	PageQuery
}

// SuppressionEmailInput names a suppressed address in the path.
type SuppressionEmailInput struct {
	Email string `path:"email" minLength:"1" maxLength:"320" example:"ada@example.com" doc:"The address, in any case (percent-encode it in the path if it holds a /, ?, # or %)."`
}

func (s *Server) registerSuppressions() {
	tags := []string{"Suppressions"}
	register(s, huma.Operation{
		OperationID: "list-suppressions", Method: http.MethodGet, Path: "/api/v1/suppressions",
		Summary: "List suppressions", Tags: tags,
		Description: "The organization's suppression list, oldest first, in pages of limit (default 20) with cursor: recipients it no longer sends to after a hard bounce or a complaint and, for emails sent with unsubscribe on, after an unsubscribe. " +
			"The list belongs to the organization: a key scoped to one sending domain sees all of it. Keys with send or admin.",
		Errors:   []int{http.StatusUnprocessableEntity},
		Metadata: map[string]any{permissionMetadata: []string{PermissionSend, PermissionAdmin}},
	}, s.listSuppressions)
	register(s, huma.Operation{
		OperationID: "delete-suppression", Method: http.MethodDelete, Path: "/api/v1/suppressions/{email}",
		Summary: "Delete suppression", Tags: tags,
		Description: "Removes the address (compared lower-cased) from the suppression list, so the organization may send to it again, and answers with the removed entry. " +
			"404 when it is not on the list.",
		Errors: []int{http.StatusNotFound, http.StatusUnprocessableEntity},
	}, s.deleteSuppression)
}

func (s *Server) listSuppressions(ctx context.Context, in *ListSuppressionsInput) (*Response[SuppressionList], error) {
	// The list can be long: it always pages.
	const list = "suppressions"
	page, err := storePage[int64](in.PageQuery, list, defaultPageSize, nil)
	if err != nil {
		return nil, err
	}
	rows, more, err := s.store.ListSuppressions(ctx, principalFrom(ctx).OrganizationID, page)
	if err != nil {
		return nil, err
	}
	out := SuppressionList{Suppressions: make([]Suppression, 0, len(rows))}
	for i := range rows {
		out.Suppressions = append(out.Suppressions, suppressionFromStore(&rows[i]))
	}
	out.PageInfo, err = pageInfo(page, list, rows, more, func(s *store.Suppression) int64 { return s.ID })
	if err != nil {
		return nil, err
	}
	return respond(out), nil
}

func (s *Server) deleteSuppression(ctx context.Context, in *SuppressionEmailInput) (*Response[SuppressionData], error) {
	if hasNUL(in.Email) {
		// Never on a list (a text column cannot hold a NUL), and the store
		// cannot even look it up: answer like any address not on it.
		return nil, notFoundError("suppression")
	}
	sup, err := s.store.DeleteSuppression(ctx, principalFrom(ctx).OrganizationID, in.Email)
	if errors.Is(err, store.ErrNotFound) {
		// The message never repeats the address: it is personal data.
		return nil, notFoundError("suppression")
	}
	if err != nil {
		return nil, err
	}
	return respond(SuppressionData{Suppression: suppressionFromStore(sup)}), nil
}
