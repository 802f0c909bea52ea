package api

import (
	"context"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/mailyard/mailyard/internal/store"
)

// DomainDetail is data.domain of Get domain and Update DKIM settings.
type DomainDetail struct {
	ID                int64          `json:"id" example:"1"`
	Domain            string         `json:"domain" example:"example.com"`
	Status            string         `json:"status" enum:"pending,verified,failed"`
	MailFromSubdomain string         `json:"mailfrom_subdomain" example:"mail.example.com"`
	CreatedAt         time.Time      `json:"created_at"`
	VerifiedAt        *time.Time     `json:"verified_at" nullable:"true"`
	LastCheckedAt     *time.Time     `json:"last_checked_at" nullable:"true"`
	DKIM              DKIMState      `json:"dkim"`
	Tracking          DomainTracking `json:"tracking"`
}

// DKIMState is a domain's signing keys and rotation, never key material.
type DKIMState struct {
	ActiveSelector *string      `json:"active_selector" nullable:"true" doc:"The selector that signs (<token>-N); null until the keys are published." example:"k3x9-1"`
	Rotation       DKIMRotation `json:"rotation"`
	Keys           []DKIMKey    `json:"keys"`
}

// DKIMRotation is the domain's automatic rotation and its timing.
type DKIMRotation struct {
	Enabled        bool       `json:"enabled"`
	IntervalDays   int        `json:"interval_days" example:"180"`
	LastRotatedAt  *time.Time `json:"last_rotated_at" nullable:"true"`
	NextRotationAt *time.Time `json:"next_rotation_at" nullable:"true" doc:"When automatic rotation next switches keys; null when it is off or the domain is not verified."`
	InProgress     bool       `json:"in_progress"`
}

// DKIMKey describes one key of the domain.
type DKIMKey struct {
	Selector  string    `json:"selector"`
	State     string    `json:"state" enum:"active,standby,publishing" doc:"active signs; standby is published and signs after the next rotation; publishing is a new key on its way into DNS."`
	Bits      int       `json:"bits" example:"2048"`
	CreatedAt time.Time `json:"created_at"`
}

// DomainDetailData is the data of Get domain.
type DomainDetailData struct {
	Domain DomainDetail `json:"domain"`
}

// DeletedDomain is data.domain of Delete domain.
type DeletedDomain struct {
	ID     int64  `json:"id"`
	Domain string `json:"domain"`
	Status string `json:"status" enum:"deleted"`
}

// DeletedDomainData is the data of Delete domain.
type DeletedDomainData struct {
	Domain DeletedDomain `json:"domain"`
}

// RotationStarted is data.rotation of Rotate DKIM key.
type RotationStarted struct {
	Status         string `json:"status" enum:"waiting_for_dns,switched" doc:"waiting_for_dns until the standby key is seen through your CNAME, then switched."`
	ActiveSelector string `json:"active_selector" doc:"The selector that signs now."`
	NextSelector   string `json:"next_selector" doc:"The selector that signs once the rotation switches."`
}

// RotationStartedData is the data of Rotate DKIM key.
type RotationStartedData struct {
	Rotation RotationStarted `json:"rotation"`
}

// UpdateDKIMInput is the body of Update DKIM settings.
type UpdateDKIMInput struct {
	DomainIDInput
	Body struct {
		RotationEnabled      *bool `json:"rotation_enabled,omitempty" doc:"Rotate the signing key automatically."`
		RotationIntervalDays *int  `json:"rotation_interval_days,omitempty" minimum:"8" maximum:"730" doc:"Days between automatic rotations."`
	}
}

func (s *Server) registerDomainLifecycle() {
	register(s, huma.Operation{
		OperationID: "get-domain", Method: http.MethodGet, Path: "/api/v1/domains/{id}",
		Summary: "Get domain", Tags: []string{"Domains"},
		Description: "The domain with its DKIM keys (selectors and states, never key material) and rotation settings.",
		Errors:      []int{http.StatusNotFound},
	}, s.getDomain)
	register(s, huma.Operation{
		OperationID: "delete-domain", Method: http.MethodDelete, Path: "/api/v1/domains/{id}",
		Summary: "Delete domain", Tags: []string{"Domains"},
		Description: "Deletes the domain. Before the answer it leaves every list, answers 404, and every credential scoped to it is revoked. " +
			"Its DKIM records stay published for the retain time (7 days by default) so mail already sent still verifies, then are removed and the private keys erased. " +
			"The same name can be added again at once (with a new token).",
		Errors: []int{http.StatusNotFound},
	}, s.deleteDomain)
	register(s, huma.Operation{
		OperationID: "rotate-dkim", Method: http.MethodPost, Path: "/api/v1/domains/{id}/dkim/rotate", DefaultStatus: http.StatusAccepted,
		Summary: "Rotate DKIM key", Tags: []string{"Domains"},
		Description: "Starts a DKIM key rotation: once the standby key is seen through your CNAME, it signs; the old key stays published for the retain time and is then replaced by a fresh standby key. No DNS change is needed on your side.",
		Errors:      []int{http.StatusNotFound, http.StatusConflict},
	}, s.rotateDKIM)
	register(s, huma.Operation{
		OperationID: "update-dkim-settings", Method: http.MethodPatch, Path: "/api/v1/domains/{id}/dkim",
		Summary: "Update DKIM settings", Tags: []string{"Domains"},
		Description: "Turns automatic DKIM rotation on or off and sets its interval (8 to 730 days; 180 by default).",
		Errors:      []int{http.StatusNotFound, http.StatusUnprocessableEntity, http.StatusBadRequest},
	}, s.updateDKIMSettings)
}

func (s *Server) getDomain(ctx context.Context, in *DomainIDInput) (*Response[DomainDetailData], error) {
	d, err := s.store.DomainInOrganization(ctx, principalFrom(ctx).OrganizationID, in.ID)
	if err != nil {
		return nil, err
	}
	detail, err := s.domainDetail(ctx, d)
	if err != nil {
		return nil, err
	}
	return respond(DomainDetailData{Domain: detail}), nil
}

func (s *Server) domainDetail(ctx context.Context, d *store.Domain) (DomainDetail, error) {
	ks, err := s.store.CurrentDKIMKeys(ctx, d.ID)
	if err != nil {
		return DomainDetail{}, err
	}
	out := DomainDetail{
		ID: d.ID, Domain: d.Domain, Status: d.Status, MailFromSubdomain: d.MailFromSubdomain,
		CreatedAt: d.CreatedAt.UTC(), VerifiedAt: utc(d.VerifiedAt), LastCheckedAt: utc(d.LastCheckedAt),
		DKIM: DKIMState{
			Rotation: DKIMRotation{
				Enabled: d.RotationEnabled, IntervalDays: d.RotationIntervalDays,
				LastRotatedAt: utc(d.LastRotatedAt), NextRotationAt: utc(d.NextRotationAt()), InProgress: d.RotationInProgress(),
			},
			Keys: make([]DKIMKey, 0, len(ks)),
		},
	}
	for _, k := range ks {
		if k.State == store.DKIMActive {
			out.DKIM.ActiveSelector = &k.Selector
		}
		out.DKIM.Keys = append(out.DKIM.Keys, DKIMKey{Selector: k.Selector, State: k.State, Bits: k.Bits, CreatedAt: k.CreatedAt.UTC()})
	}
	out.Tracking, err = s.domainTracking(ctx, d)
	return out, err
}

func (s *Server) deleteDomain(ctx context.Context, in *DomainIDInput) (*Response[DeletedDomainData], error) {
	d, err := s.store.DeleteDomainForCustomer(ctx, principalFrom(ctx).OrganizationID, in.ID)
	if err != nil {
		return nil, err
	}
	// From here the domain is gone for the customer. What follows is repeated
	// by a retried DELETE until it has all happened (the domain stays
	// "deleting" until then).
	if err := s.lifecycle.Delete(ctx, d.OrganizationID, d.ID); err != nil {
		return nil, err
	}
	if err := s.store.ConfirmDomainDeleted(ctx, d.ID); err != nil {
		return nil, err
	}
	return respond(DeletedDomainData{Domain: DeletedDomain{ID: d.ID, Domain: d.Domain, Status: store.DomainDeleted}}), nil
}

func (s *Server) rotateDKIM(ctx context.Context, in *DomainIDInput) (*Response[RotationStartedData], error) {
	d, err := s.store.DomainInOrganization(ctx, principalFrom(ctx).OrganizationID, in.ID)
	if err != nil {
		return nil, err
	}
	switch {
	case d.Status != store.DomainVerified:
		return nil, store.ErrDomainNotVerified
	case d.RotationInProgress():
		return nil, store.ErrRotationInProgress
	}
	st, err := s.lifecycle.Rotate(ctx, d.OrganizationID, d.ID)
	if err != nil {
		return nil, err
	}
	return respond(RotationStartedData{Rotation: st}), nil
}

func (s *Server) updateDKIMSettings(ctx context.Context, in *UpdateDKIMInput) (*Response[DomainDetailData], error) {
	b := in.Body
	if b.RotationEnabled == nil && b.RotationIntervalDays == nil {
		return nil, fieldError("body", "give rotation_enabled, rotation_interval_days or both")
	}
	d, err := s.store.UpdateRotationSettings(ctx, principalFrom(ctx).OrganizationID, in.ID, b.RotationEnabled, b.RotationIntervalDays)
	if err != nil {
		return nil, err
	}
	if d.Status == store.DomainVerified {
		// The rotation workflow re-arms its timer with the new settings.
		if err := s.lifecycle.SettingsChanged(ctx, d.OrganizationID, d.ID); err != nil {
			return nil, err
		}
	}
	detail, err := s.domainDetail(ctx, d)
	if err != nil {
		return nil, err
	}
	return respond(DomainDetailData{Domain: detail}), nil
}
