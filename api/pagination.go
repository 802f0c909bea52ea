package api

import (
	"encoding/base64"
	"encoding/json"

	"github.com/danielgtaylor/huma/v2"

	"github.com/mailyard/mailyard/internal/store"
)

// defaultPageSize is the page size of a list that always pages (deliveries) and of
// a request that passes a cursor without a limit.
const defaultPageSize = 20

// cursorVersion is the first field of every cursor, so the format can change
// later without misreading cursors that clients still hold.
const cursorVersion = 1

// PageQuery is the query of every GET list: embed it in the list's input.
type PageQuery struct {
	Limit  int    `query:"limit" minimum:"1" maximum:"100" doc:"Page size, 1 to 100. With it, data also holds next_cursor and has_more. Lists of domains, credentials and webhooks answer every row without it."`
	Cursor string `query:"cursor" doc:"The next_cursor of the previous page of the same list; opaque."`
}

// PageInfo follows a list's rows in data when the request paged (it passed
// limit or cursor, or the list always pages); otherwise both fields are left
// out, so the lists of the first release keep their exact shape.
type PageInfo struct {
	NextCursor NextCursor `json:"next_cursor,omitzero"`
	HasMore    *bool      `json:"has_more,omitempty" doc:"Whether another page follows; present when the request paged."`
}

// NextCursor is the cursor of the next page: a string, null on the last page,
// absent when the request did not page.
type NextCursor struct {
	paged bool
	next  string
}

// IsZero leaves the field out of an answer that did not page (omitzero).
func (c NextCursor) IsZero() bool { return !c.paged }

// MarshalJSON writes the cursor, or null on the last page.
func (c NextCursor) MarshalJSON() ([]byte, error) {
	if c.next == "" {
		return []byte("null"), nil
	}
	return json.Marshal(c.next)
}

// Schema documents the field as a nullable string.
func (NextCursor) Schema(huma.Registry) *huma.Schema {
	return &huma.Schema{Type: huma.TypeString, Nullable: true,
		Description: "Pass as cursor to get the next page; null on the last page. Present when the request paged."}
}

// cursorKey is the type of a list's key: an id or a UUID.
type cursorKey interface{ ~int64 | ~string }

// cursor is what a cursor encodes: the list it belongs to and the key of the
// last row of the page it followed. base64url of JSON: opaque to clients, and a
// cursor of one list is refused by another.
type cursor[K cursorKey] struct {
	Version int    `json:"v"`
	List    string `json:"l"`
	After   K      `json:"a"`
}

// errBadCursor is the answer to a cursor that is not one this list gave out.
func errBadCursor() error {
	return fieldError("query.cursor", "cursor must be the next_cursor of a previous page of this list")
}

// storePage turns the query into the store's page request for the named list.
// defaultLimit is the page size without a limit (0: every row, unless a cursor
// asks for paging). key, when set, checks a decoded key before it reaches SQL
// and gives the form SQL gets (canonicalUUID for a UUID).
func storePage[K cursorKey](q PageQuery, list string, defaultLimit int, key func(K) (K, bool)) (store.Page, error) {
	p := store.Page{Limit: q.Limit}
	if p.Limit == 0 {
		p.Limit = defaultLimit
	}
	if q.Cursor == "" {
		return p, nil
	}
	if p.Limit == 0 {
		p.Limit = defaultPageSize
	}
	raw, err := base64.RawURLEncoding.DecodeString(q.Cursor)
	if err != nil {
		return p, errBadCursor()
	}
	var c cursor[K]
	if err := json.Unmarshal(raw, &c); err != nil || c.Version != cursorVersion || c.List != list {
		return p, errBadCursor()
	}
	if key != nil {
		var ok bool
		if c.After, ok = key(c.After); !ok {
			return p, errBadCursor()
		}
	}
	p.After = c.After
	return p, nil
}

// pageInfo describes the page rows of the list: the cursor after its last row
// when more follow. key reads a row's key.
func pageInfo[T any, K cursorKey](p store.Page, list string, rows []T, more bool, key func(*T) K) (PageInfo, error) {
	if p.Limit == 0 {
		return PageInfo{}, nil
	}
	info := PageInfo{NextCursor: NextCursor{paged: true}, HasMore: &more}
	if more && len(rows) > 0 {
		raw, err := json.Marshal(cursor[K]{Version: cursorVersion, List: list, After: key(&rows[len(rows)-1])})
		if err != nil {
			return PageInfo{}, err
		}
		info.NextCursor.next = base64.RawURLEncoding.EncodeToString(raw)
	}
	return info, nil
}
