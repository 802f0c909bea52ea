package api

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/danielgtaylor/huma/v2"

	"github.com/mailyard/mailyard/internal/apperr"
	"github.com/mailyard/mailyard/internal/keyauth"
	"github.com/mailyard/mailyard/internal/keys"
	"github.com/mailyard/mailyard/internal/store"
)

// maxLabelLength bounds a credential's label, counted in characters after trimming.
const maxLabelLength = 100

// usernameLength is the random part of a credential's username (before "@domain").
const usernameLength = 10

// Credential is an API key as List credentials shows it. The secret is never shown
// again after creation.
type Credential struct {
	ID            int64      `json:"id" example:"7"`
	Label         string     `json:"label" example:"production sender"`
	Username      string     `json:"username" example:"k3v9x0q2ma@example.com" doc:"Generated login, usable for SMTP."`
	SendingDomain *string    `json:"sending_domain" nullable:"true" example:"example.com" doc:"The domain the key is scoped to; null for the organization's bootstrap key."`
	Permissions   []string   `json:"permissions" nullable:"false" example:"[\"send\"]"`
	Status        string     `json:"status" enum:"active,revoked"`
	LastUsedAt    *time.Time `json:"last_used_at" nullable:"true" doc:"Last use, recorded at most once a minute; null until first use."`
	CreatedAt     time.Time  `json:"created_at"`
}

// NewCredential is the credential part of Create credential's answer.
type NewCredential struct {
	ID          int64    `json:"id" example:"7"`
	Label       string   `json:"label" example:"production sender"`
	Username    string   `json:"username" example:"k3v9x0q2ma@example.com"`
	Permissions []string `json:"permissions" nullable:"false" example:"[\"send\"]"`
	Status      string   `json:"status" enum:"active"`
}

// RevokedCredential is Delete credential's answer.
type RevokedCredential struct {
	ID       int64  `json:"id" example:"7"`
	Label    string `json:"label" example:"production sender"`
	Username string `json:"username" example:"k3v9x0q2ma@example.com"`
	Status   string `json:"status" enum:"revoked"`
}

// CredentialList is the data of List credentials.
type CredentialList struct {
	Credentials []Credential `json:"credentials"`
	PageInfo
}

// ListCredentialsInput pages through the credentials.
type ListCredentialsInput struct {
	PageQuery
}

// CreatedCredential is the data of Create credential: the only time the secret
// key is shown.
type CreatedCredential struct {
	Credential NewCredential `json:"credential"`
	SecretKey  string        `json:"secret_key" example:"myk_..." doc:"The API key. Shown once; only its digest is stored."`
}

// RevokedCredentialData is the data of Delete credential.
type RevokedCredentialData struct {
	Credential RevokedCredential `json:"credential"`
}

// CreateCredentialBody is the request of Create credential.
type CreateCredentialBody struct {
	SendingDomainID int64    `json:"sending_domain_id" minimum:"1" doc:"Id of a verified domain of your organization."`
	Label           string   `json:"label" minLength:"1" doc:"Human-readable name, 1–100 characters after trimming, no control characters (bidirectional controls included)."`
	Permissions     []string `json:"permissions" nullable:"false" minItems:"1" enum:"send,stats,admin" doc:"Distinct values from send, stats, admin."`
}

// Resolve adds the checks a JSON schema cannot express; the schema already caught
// an empty label and unknown permissions, so each bad field gets one detail.
func (b *CreateCredentialBody) Resolve(_ huma.Context, prefix *huma.PathBuffer) []error {
	var errs []error
	if b.Label != "" {
		label := strings.TrimSpace(b.Label)
		if n := utf8.RuneCountInString(label); n == 0 || n > maxLabelLength {
			errs = append(errs, &huma.ErrorDetail{Location: prefix.With("label"), Message: "label must be 1 to " + strconv.Itoa(maxLabelLength) + " characters after trimming", Value: b.Label})
		} else if hasControl(label) {
			// Checked after trimming, which the stored label is: a NUL
			// would be a 500 (the store cannot take it) and the other
			// control characters garble every list that shows the label
			// (a bidirectional override makes it read as another).
			errs = append(errs, &huma.ErrorDetail{Location: prefix.With("label"), Message: "label must not contain control characters", Value: b.Label})
		}
	}
	prefix.Push("permissions")
	defer prefix.Pop()
	seen := map[string]bool{}
	for i, p := range b.Permissions {
		if !validPermission(p) {
			continue // the schema reports it
		}
		if seen[p] {
			errs = append(errs, &huma.ErrorDetail{Location: prefix.WithIndex(i), Message: "duplicate permission " + p, Value: p})
		}
		seen[p] = true
	}
	return errs
}

func validPermission(p string) bool {
	return p == PermissionSend || p == PermissionStats || p == PermissionAdmin
}

// CreateCredentialInput is Create credential's input.
type CreateCredentialInput struct {
	Body CreateCredentialBody
}

// CredentialIDInput names one credential.
type CredentialIDInput struct {
	ID int64 `path:"id" doc:"Credential id."`
}

func (s *Server) registerCredentials() {
	register(s, huma.Operation{
		OperationID: "list-credentials", Method: http.MethodGet, Path: "/api/v1/credentials",
		Summary: "List credentials", Tags: []string{"Credentials"},
		Description: "The active API keys of the key's organization, oldest first: all of them, or a page with limit and cursor.",
		Errors:      []int{http.StatusUnprocessableEntity},
	}, s.listCredentials)
	register(s, huma.Operation{
		OperationID: "create-credential", Method: http.MethodPost, Path: "/api/v1/credentials",
		Summary: "Create credential", Tags: []string{"Credentials"}, DefaultStatus: http.StatusCreated,
		Description: "Creates an API key scoped to a verified domain. The secret key is in this answer only.",
		Errors:      []int{http.StatusBadRequest, http.StatusNotFound, http.StatusConflict, http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity},
	}, s.createCredential)
	register(s, huma.Operation{
		OperationID: "delete-credential", Method: http.MethodDelete, Path: "/api/v1/credentials/{id}",
		Summary: "Delete credential", Tags: []string{"Credentials"},
		Description: "Revokes an API key for good. Its next request, on any API process, gets 401. A key may revoke itself.",
		Errors:      []int{http.StatusNotFound},
	}, s.deleteCredential)
}

func (s *Server) listCredentials(ctx context.Context, in *ListCredentialsInput) (*Response[CredentialList], error) {
	const list = "credentials"
	page, err := storePage[int64](in.PageQuery, list, 0, nil)
	if err != nil {
		return nil, err
	}
	rows, more, err := s.store.ActiveCredentials(ctx, principalFrom(ctx).OrganizationID, page)
	if err != nil {
		return nil, err
	}
	out := CredentialList{Credentials: make([]Credential, 0, len(rows))}
	for _, k := range rows {
		out.Credentials = append(out.Credentials, credentialFromStore(k))
	}
	out.PageInfo, err = pageInfo(page, list, rows, more, func(k *store.APIKey) int64 { return k.ID })
	return respond(out), err
}

func credentialFromStore(k store.APIKey) Credential {
	c := Credential{
		ID: k.ID, Label: k.Label, Username: k.Username, SendingDomain: k.SendingDomain,
		Permissions: k.Permissions, Status: k.Status, CreatedAt: k.CreatedAt.UTC(),
	}
	if k.LastUsedAt != nil {
		at := k.LastUsedAt.UTC()
		c.LastUsedAt = &at
	}
	return c
}

func (s *Server) createCredential(ctx context.Context, in *CreateCredentialInput) (*Response[CreatedCredential], error) {
	orgID := principalFrom(ctx).OrganizationID
	domain, err := s.store.DomainInOrganization(ctx, orgID, in.Body.SendingDomainID)
	if err := sendingDomainProblem(domain, err); err != nil {
		return nil, err
	}

	local, err := keys.RandomString(usernameLength, keys.LowerAlnum)
	if err != nil {
		return nil, err
	}
	secret, key, err := keyauth.New(strings.TrimSpace(in.Body.Label), local+"@"+domain.Domain, store.Permissions(in.Body.Permissions))
	if err != nil {
		return nil, err
	}
	key.OrganizationID, key.SendingDomainID = orgID, &domain.ID
	// Checked again with the domain's row locked: a deletion that came
	// after the read above revoked the domain's keys without this one.
	if err := s.store.CreateDomainCredential(ctx, key, sendingDomainProblem); err != nil {
		return nil, err
	}
	return respond(CreatedCredential{
		Credential: NewCredential{ID: key.ID, Label: key.Label, Username: key.Username, Permissions: key.Permissions, Status: key.Status},
		SecretKey:  secret,
	}), nil
}

// sendingDomainProblem is the error that refuses a credential for the
// sending domain d as read (err is the read's error): not found (for a
// domain of another organization or deleted too), or not verified.
func sendingDomainProblem(d *store.Domain, err error) error {
	if errors.Is(err, store.ErrNotFound) {
		// The id comes from the body, not the path: say which field named it.
		return apperr.Errorf(apperr.NotFound, "domain", "sending domain not found")
	}
	if err != nil {
		return err
	}
	if d.Status != store.DomainVerified {
		return apperr.Errorf(apperr.DomainNotVerified, "domain", "domain %s is %s; credentials need a verified domain", d.Domain, d.Status)
	}
	return nil
}

func (s *Server) deleteCredential(ctx context.Context, in *CredentialIDInput) (*Response[RevokedCredentialData], error) {
	key, err := s.store.RevokeCredential(ctx, principalFrom(ctx).OrganizationID, in.ID)
	if err != nil {
		return nil, err
	}
	return respond(RevokedCredentialData{Credential: RevokedCredential{
		ID: key.ID, Label: key.Label, Username: key.Username, Status: key.Status,
	}}), nil
}
